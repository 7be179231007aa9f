"""Thread priorities: the studio's pages draw below the process's own priority, and its work threads never do.

What it is for: the studio's work threads (its chat and evaluation model workers, calibrations; and, before runs
trained in child processes of their own (runs.py), the runs) share the process that draws its pages, and so its
interpreter lock. A page's Python holds that lock while a training thread, between two torch operations,
waits for it; with the cores busy the page thread wins a core and the step stalls (a forward and backward of the
default model on a thread took 24.4 s beside one busy Python thread, 14.5 s alone and 13.8 s beside the same thread
at nice 19: medians of 4, load 7-8 on 2 cores; benchmarks/README.md, "Pages beside training"). Linux gives each
thread its own nice value, unprivileged, so a page thread lowers its own priority (`lower_this_thread`) and the
kernel gives the training threads the cores first. In the studio's setting (an SL run training while ten pages load
again and again in its process, two rounds interleaved) a step took 5.1 s in the median with pages at nice 10
against 11.4 s at the process's priority and 3.1 s without pages (benchmarks/pages_beside_training.py).

A thread inherits the nice value of the thread that starts it, and an unprivileged thread can never raise its
priority again; a child process inherits it too. So every thread that does the studio's work (a model worker, an
evaluation, a calibration, the thread that waits for a run's process) is started with `start(thread)`, and a run's
process with `at_process_priority`: from a page thread it is handed to a starter thread kept at the process's
priority, so a run started from the New run form trains at the priority of the studio itself, not the page's.

What it is not: a scheduler or a limit on pages; on a system without per-thread priorities (not Linux) it does
nothing. COOKBOOK_PAGE_NICE sets how far below the process pages draw (default 10; 0 turns it off, as
benchmarks/pages_beside_training.py does to measure the studio without it).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

PAGE_NICE_ENV = "COOKBOOK_PAGE_NICE"
PAGE_NICE = 10  # how many nice steps below the process a page draws
MAX_NICE = 19

T = TypeVar("T")
log = logging.getLogger(__name__)

_starter_lock = threading.Lock()
_starter_jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future]] | None = None


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "setpriority")


def process_nice() -> int:
    """The process's own nice value (its main thread's: on Linux the main thread's id is the process id)."""
    return os.getpriority(os.PRIO_PROCESS, os.getpid()) if supported() else 0


def thread_nice(native_id: int | None = None) -> int:
    """The nice value of a thread (this one by default)."""
    if not supported():
        return 0
    return os.getpriority(os.PRIO_PROCESS, native_id or threading.get_native_id())


def lower_this_thread() -> None:
    """Let this thread (a page's script thread) run COOKBOOK_PAGE_NICE steps below the process. It cannot be undone,
    which is why work threads are started through `start`. Harmless to call again."""
    steps = int(os.environ.get(PAGE_NICE_ENV, PAGE_NICE))
    if not supported() or steps <= 0:
        return
    _ensure_starter()  # made first, while this thread still has the process's priority
    target = min(MAX_NICE, process_nice() + steps)
    if thread_nice() < target:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), target)


def at_process_priority(fn: Callable[[], T]) -> T:
    """fn's result, computed on a thread with the process's priority: here when this thread has it, otherwise on
    the starter thread (so whatever fn starts inherits the process's priority, not a page's)."""
    if not supported() or thread_nice() <= process_nice():
        return fn()
    jobs = _starter_jobs
    if jobs is None:  # only lower_this_thread lowers a thread, and it makes the starter first
        log.warning("thread %s runs below the process's priority and there is no starter", threading.current_thread())
        return fn()
    future: concurrent.futures.Future = concurrent.futures.Future()
    jobs.put((fn, future))
    return future.result()


def start(thread: threading.Thread) -> None:
    """Start a work thread at the process's priority, whichever thread asks."""
    at_process_priority(thread.start)


def _ensure_starter() -> None:
    global _starter_jobs
    with _starter_lock:
        if _starter_jobs is not None:
            return
        _starter_jobs = queue.SimpleQueue()
        threading.Thread(target=_serve, args=(_starter_jobs,), name="priority-starter", daemon=True).start()


def _serve(jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future]]) -> None:
    while True:
        fn, future = jobs.get()
        try:
            future.set_result(fn())
        except BaseException as exc:  # the caller gets it, as if it had called fn itself
            future.set_exception(exc)
