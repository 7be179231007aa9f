"""Process-wide state the studio pages share: the RunManager, default-model preparation, the Tinker status.

These live in the Streamlit server process, not in a browser session: the RunManager (the engine's singleton)
trains every run in a child process of its own and watches it from a background thread, so reloading or closing a
page never touches a run. Preparing the default
model (~20 s the first time) and probing the Tinker service (a few seconds) happen on background threads too, and
the pages only read their status. Preparation is guarded by a file lock in the model cache, so `scripts/run.sh`
can start it in a helper process (`python -m app.state`) before the first page is opened and the studio sees it
as "being prepared". Nothing here draws widgets.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from cookbook_engine import models, paths, priority, shutdown
from cookbook_engine.runs import RunManager, get_manager
from storage import RunStore

TINKER_KEY_ENV = "TINKER_API_KEY"
TINKER_STATUS_TTL_S = 120.0


class ModelState(StrEnum):
    """Where the default model's one-time preparation stands."""

    READY = "ready"
    PREPARING = "preparing"
    FAILED = "failed"
    MISSING = "missing"


MODEL_STATE_LABEL = {
    ModelState.READY: "ready",
    ModelState.PREPARING: "being prepared",
    ModelState.FAILED: "failed",
    ModelState.MISSING: "not prepared",
}


class TinkerState(StrEnum):
    """What the studio knows about the hosted Tinker service."""

    NO_KEY = "no_key"
    CHECKING = "checking"
    OK = "ok"
    ERROR = "error"
    UNAVAILABLE = "unavailable"  # this build has no Tinker backend


def manager() -> RunManager:
    """The process's RunManager (for the current COOKBOOK_HOME); the studio's trains each run in a child process,
    so drawing a page never holds up a training step (cookbook_engine/run_process.py)."""
    return get_manager(child_processes=True)


def store() -> RunStore:
    """The studio's store; every page gets it here, so this is also where a running studio notices runs whose
    process died (at most every few seconds) and shows them as interrupted instead of running forever."""
    runs = manager()
    runs.notice_orphans()
    return runs.store


# ---------------------------------------------------------------------------------------- page slots

PAGE_SLOTS_ENV = "COOKBOOK_PAGE_SLOTS"  # 0: no limit (benchmarks/pages_beside_training.py compares both)
PAGE_SLOT_WAIT_S = 5.0
_page_slot = threading.BoundedSemaphore(1)


@contextmanager
def page_slot():
    """Draw one page at a time while a run trains in this process.

    Pages render on Streamlit's script threads, in the same process as the runs' training; ten pages opened at
    once took both cores of a 2-core machine from a training step (23.6 s instead of ~4 s). While a run trains, a
    page waits for the one drawn before it (at most PAGE_SLOT_WAIT_S: a chat reply streaming for a minute holds its
    slot, and a page must not hang behind it), so page rendering keeps to about one core. With no run training,
    pages draw side by side as before."""
    if int(os.environ.get(PAGE_SLOTS_ENV, 1)) <= 0 or not manager().active_run_ids():
        yield
        return
    held = _page_slot.acquire(timeout=PAGE_SLOT_WAIT_S)
    try:
        yield
    finally:
        if held:
            _page_slot.release()


# ---------------------------------------------------------------------------------------- default model


_prep_lock = threading.Lock()
_prep_thread: threading.Thread | None = None
_prep_error: str | None = None


def _lock_file() -> Path:
    return paths.models_dir() / ".default-model.lock"


@contextmanager
def _exclusive(blocking: bool = True):
    """Hold the preparation lock (shared with other processes through the file); yields False if not blocking
    and another holder has it."""
    with open(_lock_file(), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_default_model() -> None:
    """Block until the default model is in the cache, preparing it (or waiting for whoever is) if needed."""
    if models.default_model_ready():
        return
    with _exclusive(blocking=True):
        if models.default_model_ready():
            return
        os.utime(_lock_file())  # its mtime tells everyone when this preparation started
        models.prepare_default_model()


def _prepare_in_background() -> None:
    global _prep_error
    try:
        ensure_default_model()
        _prep_error = None
    except Exception as exc:  # shown on the home page
        _prep_error = f"{type(exc).__name__}: {exc}"


def start_default_model_preparation(retry: bool = False) -> None:
    """Start preparing the default model on a background thread, unless it is ready or being prepared. After a
    failure it starts again only when `retry` is set (a person asked)."""
    global _prep_thread, _prep_error
    if models.default_model_ready():
        return
    with _prep_lock:
        if _prep_thread is not None and _prep_thread.is_alive():
            return
        if _prep_error is not None and not retry:
            return
        _prep_error = None
        _prep_thread = threading.Thread(target=_prepare_in_background, name="prepare-default-model", daemon=True)
        priority.start(_prep_thread)
        thread = _prep_thread
        shutdown.register(
            "default model preparation", shutdown.PREPARATION, lambda timeout_s: shutdown.join_thread(thread, timeout_s)
        )


def default_model_status() -> tuple[ModelState, str]:
    """(the state, a sentence for people)."""
    if models.default_model_ready():
        return ModelState.READY, f"{models.DEFAULT_MODEL} is ready (local, CPU)"
    if _prep_error:
        return ModelState.FAILED, f"preparing {models.DEFAULT_MODEL} failed: {_prep_error}"
    preparing = _prep_thread is not None and _prep_thread.is_alive()
    if not preparing:
        with _exclusive(blocking=False) as free:
            preparing = not free
    if preparing:
        return ModelState.PREPARING, (
            f"{models.DEFAULT_MODEL} is being prepared: converted once into the model cache "
            "(about 20 s), then it loads in a second"
        )
    return ModelState.MISSING, f"{models.DEFAULT_MODEL} is not prepared yet"


def preparation_seconds() -> float:
    """Seconds since the current preparation of the default model started (meaningful while "preparing")."""
    try:
        return max(0.0, time.time() - _lock_file().stat().st_mtime)
    except OSError:
        return 0.0


# ---------------------------------------------------------------------------------------- disk use

HOME_USAGE_TTL_S = 30.0
_usage_cache: tuple[float, tuple, dict[str, int]] | None = None


def _home_signature(home: Path) -> tuple:
    """The home and its top-level parts with their modification times: a delete (of a run folder, a checkpoint
    folder, an export) changes one of them, so the disk line is measured again at once."""
    parts = sorted(home.iterdir())
    return (str(home), *((part.name, part.stat().st_mtime_ns) for part in parts))


def home_usage() -> dict[str, int]:
    """Bytes in the studio home folder, by top-level part (runs, checkpoints, exports, models, ...), measured again
    when something was added to or removed from a part, else at most every 30 s (walking the folder costs a
    moment)."""
    global _usage_cache
    home = paths.home()
    signature = _home_signature(home)
    cache = _usage_cache
    if cache and cache[1] == signature and time.monotonic() - cache[0] < HOME_USAGE_TTL_S:
        return cache[2]
    usage = {part.name: paths.size_of(part) for part in home.iterdir()}
    _usage_cache = (time.monotonic(), signature, usage)
    return usage


# ---------------------------------------------------------------------------------------- tinker


@dataclass
class TinkerStatus:
    state: TinkerState
    message: str
    models: list[str] = field(default_factory=list)
    checked_at: float = 0.0


_tinker_lock = threading.Lock()
_tinker_status: TinkerStatus | None = None
_tinker_thread: threading.Thread | None = None


def tinker_key_present() -> bool:
    from cookbook_engine import secrets

    return bool(secrets.tinker_key())


def set_tinker_key(key: str | None) -> None:
    """Use this key for the rest of the server process (kept in memory only, never saved) and probe again."""
    global _tinker_status
    from cookbook_engine import secrets

    secrets.set_session_key(key)
    try:
        from cookbook_engine.backends import tinker as tinker_backend

        tinker_backend.forget_probe()
    except ImportError:
        pass
    with _tinker_lock:
        _tinker_status = None


def _field(result, name: str, default=None):
    if isinstance(result, dict):
        return result.get(name, default)
    return getattr(result, name, default)


def _probe_tinker() -> None:
    global _tinker_status
    try:
        from cookbook_engine.backends import tinker as tinker_backend

        result = tinker_backend.probe()
        ok = bool(_field(result, "ok", False))
        names = [str(m) for m in (_field(result, "models", None) or [])]
        message = _field(result, "message", "") or ("reachable" if ok else _field(result, "reason", "unreachable"))
        status = TinkerStatus(TinkerState.OK if ok else TinkerState.ERROR, str(message), names, time.monotonic())
    except ImportError:
        status = TinkerStatus(TinkerState.UNAVAILABLE, "this build has no Tinker backend", [], time.monotonic())
    except Exception as exc:
        status = TinkerStatus(TinkerState.ERROR, f"{type(exc).__name__}: {exc}", [], time.monotonic())
    with _tinker_lock:
        _tinker_status = status


def tinker_status() -> TinkerStatus:
    """The hosted backend's status, probed on a background thread (never on the page's thread); cached 2 min."""
    global _tinker_thread
    if not tinker_key_present():
        return TinkerStatus(
            TinkerState.NO_KEY,
            f"no {TINKER_KEY_ENV} set: hosted models are off; local training "
            "works. Enter a key here or set it before starting the studio.",
        )
    with _tinker_lock:
        status = _tinker_status
        fresh = status is not None and time.monotonic() - status.checked_at < TINKER_STATUS_TTL_S
        if not fresh and (_tinker_thread is None or not _tinker_thread.is_alive()):
            _tinker_thread = threading.Thread(target=_probe_tinker, name="probe-tinker", daemon=True)
            _tinker_thread.start()
    if status is None:
        return TinkerStatus(TinkerState.CHECKING, "checking the Tinker service…")
    return status


def main() -> None:
    """`python -m app.state`: prepare the default model now (scripts/run.sh runs this next to the studio)."""
    paths.make_files_private()  # like the studio and the CLI: what it writes in the home is the user's only
    if models.default_model_ready():
        return
    print(f"studio: preparing {models.DEFAULT_MODEL} in the background (first time only, about 20 s)", flush=True)
    ensure_default_model()
    print(f"studio: {models.DEFAULT_MODEL} is ready", flush=True)


if __name__ == "__main__":
    main()
