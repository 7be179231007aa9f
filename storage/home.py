"""Where the studio home folder is and where its DuckDB file lies in it: the one piece of the file layout that
storage needs, so `Store.default()` finds the database without importing the engine.

The home folder defaults to a per-user folder and is set by the COOKBOOK_HOME environment variable. The rest of
the layout below it (run folders, model cache, uploads) is cookbook_engine.paths, which builds on `home()` here.
Not here: SQL (storage/db.py), anything written inside the home.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.input_error import InputError

HOME_ENV = "COOKBOOK_HOME"
DB_FILE = "studio.duckdb"


class HomeError(InputError, OSError):
    """The studio home folder cannot be created or written; the message names the folder and the reason."""


def home() -> Path:
    """The studio home folder, created if missing; a clear HomeError when it cannot be written."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        path = Path(configured).expanduser()
    else:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        path = Path(base) / "cookbook-studio"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise HomeError(
            f"studio home {path}: cannot create it ({exc.strerror or exc}); set {HOME_ENV} to a writable folder"
        ) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise HomeError(f"studio home {path}: not writable; set {HOME_ENV} to a writable folder")
    return path.resolve()


def db_path() -> Path:
    """The studio's DuckDB file in the home folder."""
    return home() / DB_FILE
