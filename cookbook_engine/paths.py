"""Where the studio keeps its files: the home folder and the fixed layout below it.

The home folder holds the DuckDB file, run folders (checkpoints, metrics.jsonl, ...), the model cache and
uploads. It defaults to a per-user folder and is set by the COOKBOOK_HOME environment variable: finding the home
and the DuckDB file in it is storage.home's (storage needs it and must not import the engine), re-exported here.
This module only computes paths, creates folders and measures their size; it reads and writes nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.home import HomeError, db_path, home

__all__ = [
    "HomeError",
    "db_path",
    "home",
    "human_size",
    "make_files_private",
    "models_dir",
    "run_dir",
    "runs_dir",
    "size_of",
    "uploads_dir",
]


def make_files_private() -> None:
    """From now on, files and folders this process (and the processes it starts) creates are its user's only:
    0600 and 0700. The CLI and the studio call it first: the home holds runs, uploaded data, weights and logs."""
    os.umask(0o077)


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


def size_of(path: str | Path) -> int:
    """Bytes a file or folder takes (0 when it is gone); links are not followed."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size if path.exists() or path.is_symlink() else 0
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def human_size(size: int) -> str:
    """1536 -> '1.5 KB'; powers of 1000, as disk tools show them."""
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _sub(*parts: str) -> Path:
    path = home().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
