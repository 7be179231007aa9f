"""Where the studio keeps its files: the home folder and the fixed layout below it.

The home folder holds the DuckDB file, run folders (checkpoints, metrics.jsonl, ...), the model cache and
uploads. It defaults to a per-user folder and is set by the COOKBOOK_HOME environment variable. This module
only computes paths and creates folders; it reads and writes nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path


class HomeError(OSError):
    """The studio home folder cannot be created or written; the message names the folder and the reason."""


def home() -> Path:
    """The studio home folder, created if missing; a clear HomeError when it cannot be written."""
    configured = os.environ.get("COOKBOOK_HOME")
    if configured:
        path = Path(configured).expanduser()
    else:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        path = Path(base) / "cookbook-studio"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HomeError(f"studio home {path}: cannot create it ({exc.strerror or exc}); set COOKBOOK_HOME to a "
                        "writable folder") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise HomeError(f"studio home {path}: not writable; set COOKBOOK_HOME to a writable folder")
    return path.resolve()


def db_path() -> Path:
    return home() / "studio.duckdb"


def runs_dir() -> Path:
    return _sub("runs")


def run_dir(run_id: str) -> Path:
    return _sub("runs", run_id)


def models_dir() -> Path:
    """The model cache; COOKBOOK_MODEL_CACHE may point it elsewhere (tests share one cache across homes)."""
    configured = os.environ.get("COOKBOOK_MODEL_CACHE")
    if configured:
        path = Path(configured).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    return _sub("models")


def uploads_dir() -> Path:
    return _sub("uploads")


def _sub(*parts: str) -> Path:
    path = home().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
