"""Clean exit: the project's background threads stop in a fixed order before the interpreter finalizes.

Why: background threads are daemons (closing a tab or ending a command must never hang on them), but a daemon
thread still inside torch, transformers or a tokenizer when Python finalizes lets C++ destructors run under it, and
the process aborts with "terminate called without an active exception" (seen after the default model was prepared
on a background thread, from Streamlit's AppTest and from the CLI under load). So each kind of background thread
registers how to stop it here, and one `atexit` hook stops them in order: runs training in child processes of the
studio (asked to stop after their step, and waited for within the budget), model preparation (waited for: a
conversion cannot be cut half-way), then the model workers (the request in flight finishes, queued and later ones
are cancelled, the thread ends), then the threads that were waiting on them (calibration), which now end at once.
Each stopper gets a time budget; one that overruns is logged and the exit goes on.

What it is not: how a run is cancelled (runs.py) or stopping the storage owner process (storage/).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

RUNS, PREPARATION, WORKERS, CLIENTS = 5, 10, 20, 30  # the order stoppers run in
DEFAULT_BUDGET_S = 120.0

_stoppers: dict[str, tuple[int, Callable[[float], None]]] = {}
_lock = threading.Lock()
_stopped = False


def register(name: str, order: int, stop: Callable[[float], None]) -> None:
    """Run `stop(timeout_s)` at exit, after the stoppers of lower `order` (registering a name again replaces it)."""
    with _lock:
        _stoppers[name] = (order, stop)


def join_thread(thread: threading.Thread | None, timeout_s: float) -> None:
    """A stopper for a thread that ends by itself: wait for it."""
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
        thread.join(timeout_s)
        if thread.is_alive():
            log.warning("exit: thread %s still running after %.0f s", thread.name, timeout_s)


def stop_all(budget_s: float = DEFAULT_BUDGET_S) -> None:
    """Run every stopper once, in order, within about `budget_s` in all."""
    global _stopped
    with _lock:
        if _stopped:
            return
        _stopped = True
        stoppers = sorted(_stoppers.items(), key=lambda item: item[1][0])
    deadline = time.monotonic() + budget_s
    for name, (_, stop) in stoppers:
        try:
            stop(max(1.0, deadline - time.monotonic()))
        except Exception:
            log.exception("exit: stopping %s failed", name)


atexit.register(stop_all)
