"""The compute lease: one process at a time runs model work on this machine, whichever process it is.

What it is for: the studio, a `cookbook` CLI run and `cookbook serve` each have a model worker with its own torch
thread team. Two teams on two cores oversubscribe the machine, and spin-waiting OpenMP threads make that far worse
than taking turns (measured: two SL runs at once took 1.69x their back-to-back time). Every unit of work on a local
model worker (one forward/backward, one optimizer step, one sampling call) holds this lease, so processes take
turns step by step, as the runs inside one process already do on their worker's FIFO.

How: an exclusive `flock` on `compute.lock` in this user's lease folder (`machine_folder()`: a 0700 folder in the
system's temporary directory, the same whatever studio home a process uses), taken through a turnstile
(`compute.queue`): a
process that wants the lease first takes the turnstile, so one that just released the lease queues behind the
processes already waiting instead of taking it straight back. The holder writes who it is into the lock file, so a
waiting process can say "waiting for the CPU: cookbook sl (pid 4242) is computing". A process that dies releases
its locks with it (the kernel drops flocks on exit), so a crash never leaves the machine locked.

What it is not: a scheduler (no priorities; turns are one unit of work each), nor a lock for anything but model
compute: tokenizing, grading in the sandbox and storage run outside it. Processes of different users do not see
each other's lease (each user has their own folder). COOKBOOK_COMPUTE_LEASE=off turns it off for a process
(benchmarks/concurrency.py measures with and without it); COOKBOOK_COMPUTE_LEASE_DIR puts the folder elsewhere.
"""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = "compute.lock"
TURNSTILE_NAME = "compute.queue"
WAIT_NOTE_AFTER_S = 1.0  # a wait shorter than this is not worth telling anyone about

_process_label = f"{Path(sys.argv[0]).name or 'python'} (pid {os.getpid()})"


def machine_folder() -> Path:
    """This user's lease folder, shared by every studio home on the machine (created private, 0700)."""
    folder = Path(
        os.environ.get("COOKBOOK_COMPUTE_LEASE_DIR") or Path(tempfile.gettempdir()) / f"cookbook-compute-{os.getuid()}"
    )
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid():  # someone else's folder at our name: never share a lock with them
        raise PermissionError(f"compute lease folder {folder} belongs to another user; set COOKBOOK_COMPUTE_LEASE_DIR")
    return folder


def set_process_label(label: str) -> None:
    """How this process is named to the processes that wait for it (e.g. "the studio", "cookbook sl run-3")."""
    global _process_label
    _process_label = f"{label} (pid {os.getpid()})"


class ComputeLease:
    """One process's handle on the machine-wide lease; `hold()` is re-entrant within the thread that holds it."""

    def __init__(self, folder: Path | None = None, enabled: bool = True):
        self.folder, self.enabled = (Path(folder) if folder is not None else None), enabled
        self.waiting_for: str | None = None  # the holder this process waits for right now, or None
        self.waiting_since = 0.0
        self.waited_seconds = 0.0  # total time spent waiting, for benchmarks and the run log
        self._holder_thread: int | None = None
        self._files: tuple[int, int] | None = None
        self._lock = threading.Lock()  # threads of this process take turns before asking the machine

    def _open(self) -> tuple[int, int]:
        if self._files is None:
            folder = self.folder or machine_folder()
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            self._files = (os.open(folder / TURNSTILE_NAME, flags, 0o600), os.open(folder / LOCK_NAME, flags, 0o600))
        return self._files

    @contextmanager
    def hold(self):
        """Run the block with the machine's compute to this process; waits (saying for whom) while another has it."""
        if self._holder_thread == threading.get_ident():  # re-entered by the thread that holds it
            yield
            return
        if not self.enabled:
            yield
            return
        with self._lock:
            turnstile, lock = self._open()
            self._acquire(turnstile, lock)
            self._holder_thread = threading.get_ident()
            try:
                yield
            finally:
                self._holder_thread = None
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _acquire(self, turnstile: int, lock: int) -> None:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                started = self.waiting_since = time.monotonic()
                self.waiting_for = read_holder(lock) or "another process"
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                finally:
                    self.waiting_for = None
                    self.waited_seconds += time.monotonic() - started
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        os.ftruncate(lock, 0)
        os.pwrite(lock, _process_label.encode(), 0)


def read_holder(lock_fd: int) -> str:
    try:
        return os.pread(lock_fd, 200, 0).decode("utf-8", errors="replace").strip()
    except OSError:
        return ""


def holder_now() -> tuple[str, int] | None:
    """(label, pid) of the process computing on this machine right now, or None when nobody is: for pages that
    show a run waiting for its turn. Takes the lock shared for an instant to see whether it is held."""
    try:
        fd = os.open(machine_folder() / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: the label is the holder's
            label = read_holder(fd)
            digits = label.rsplit("pid ", 1)[-1].rstrip(")")
            return (label, int(digits)) if digits.isdigit() else (label, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


_lease: ComputeLease | None = None
_lease_guard = threading.Lock()


def lease() -> ComputeLease:
    """This process's handle on the lease of this machine (for this user)."""
    global _lease
    with _lease_guard:
        if _lease is None:
            _lease = ComputeLease(enabled=os.environ.get("COOKBOOK_COMPUTE_LEASE", "on") != "off")
        return _lease


def waiting_note() -> str | None:
    """ "waiting for the CPU: X is computing" while this process waits for another one, else None."""
    if _lease is None or _lease.waiting_for is None or time.monotonic() - _lease.waiting_since < WAIT_NOTE_AFTER_S:
        return None
    return f"waiting for the CPU: {_lease.waiting_for} is computing"
