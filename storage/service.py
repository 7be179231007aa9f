"""A store client whose DuckDB work runs in one helper process, so a training process never opens the database.

Why: DuckDB calls glibc's `malloc_trim(0)` whenever a database is opened and closed (storage/db.py opens it for
every call, see its docstring). In a training process that hands the step's freed activation memory (~2.4 GB) back
to the kernel, and the next step page-faults it in again: +25% per step (benchmarks/README.md). `StoreClient` has
`Store`'s public methods, but a helper process (`python -c "...storage.service.main..."`, which imports only
storage/, never torch) executes them; it is started on first use, one per client, and is the only place of the
client's process where DuckDB opens the file.

- Synchronous calls (reads, create_run, status changes, checkpoints, deletes, ...) go over a duplex pipe and wait
  for the reply. An exception raised by `Store` in the helper is raised again at the call site, same type and
  message, so existing error handling keeps working.
- The training loop's hot-path writes, `log_metrics`, `add_transcripts` and `update_run` with only step and
  total_steps, are checked here at the call site (bad input raises at once and writes nothing), then sent over a
  one-way pipe without waiting for an answer (`Connection.send`, synchronous, into a 1 MiB pipe buffer). The helper
  buffers them and applies them in order in one transaction (`Store.write_batch`): when the oldest is
  FLUSH_INTERVAL_S old, before serving any other call (reads see earlier writes), and when this process closes the
  client or ends, even by SIGKILL (the helper reads the pipe to its end and writes everything that was sent).
- A buffered write that fails in the helper raises `StorageWriteError` from the client's next write call or
  `run_status` for that run (a training loop polls `run_status` every second, so its run fails with the message).
  Reads never raise it: a page showing the run must not take the error away from the loop.
- `run_status(run_id)` is answered at once from the helper's last read, without opening the database. The helper
  reads the status of every run polled in the last WATCH_S seconds in each flush transaction; when a poll finds
  that read FLUSH_INTERVAL_S old, the helper syncs right after answering (one open carries the step's writes and
  the status read), and it re-reads on its own at least every STATUS_REFRESH_S. So a cancel made by another
  process is seen at the first step boundary at least ~2 s after it (about 5 s for steps longer than that), and a
  training step costs the helper one open, not two.
- Life cycle: the helper is stopped by `close()`, when the client is garbage collected, and at interpreter exit
  (closing the pipes; the helper flushes and exits, and is waited for, so it never stays a zombie). On its own it
  exits at end of file on its pipes or when its parent process changes, and ignores Ctrl-C (the parent decides).
  If it dies, the call that notices raises `StorageServiceError` with its exit code, writes sent to it since its
  last flush are reported by `StorageWriteError` on their runs' next write call, and the next call starts a fresh
  helper.

Not here: SQL (storage/db.py). Not a server shared between processes: every process that makes a client has its
own helper, and the database file is shared between processes as db.py describes (short transactions with retry).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import pandas as pd

from storage.db import (
    DEFAULT_LOCK_WAIT_S,
    Store,
    clean_run_fields,
    metrics_table,
    transcripts_table,
)
from storage.home import db_path
from storage.statuses import RunStatus

FLUSH_INTERVAL_S = 2.0  # buffered writes wait at most this long; polled statuses are at most this old
STATUS_REFRESH_S = 5.0  # polled statuses are re-read at least this often even when nothing is written
WATCH_S = 120.0  # a run's status is re-read while run_status was asked for it within this long
STOP_WAIT_S = 60.0  # how long closing waits for the helper's last flush before killing it
PIPE_BUFFER_BYTES = 1 << 20  # the write pipe's kernel buffer: a step's transcripts fit without waiting
HOT_RUN_FIELDS = frozenset({"step", "total_steps"})  # update_run with only these is buffered (the progress bar)
_REPO = Path(__file__).resolve().parent.parent

# Calls about one run (their first argument is the run id) that raise an earlier failed buffered write of that run.
_RAISES_FAILED_WRITES = frozenset(
    {
        "run_status",
        "update_run",
        "claim_run",
        "add_checkpoint",
        "log_metrics",
        "log_metrics_bulk",
        "add_transcripts",
        "delete_metrics_after",
        "delete_transcripts_after",
    }
)
# Calls about one run that may change its status: run_status reads that run again afterwards.
_CHANGES_STATUS = frozenset({"create_run", "update_run", "claim_run", "delete_run"})


class StorageServiceError(RuntimeError):
    """The storage helper process ended unexpectedly (or could not be reached)."""


class StorageWriteError(RuntimeError):
    """A buffered write (metrics, transcripts, progress) failed after the call that made it had returned."""


def _failed_write_run(method: str, args: tuple, kwargs: dict) -> str | None:
    """The run whose earlier failed buffered writes this call reports, if it is one that reports them."""
    if method not in _RAISES_FAILED_WRITES:
        return None
    return kwargs.get("run_id", args[0] if args else None)


# ----------------------------------------------------------------------------------------------------------------
# The client side (the process that trains or serves pages)


class _Helper:
    """One running helper process and the parent's ends of its two pipes."""

    def __init__(self, path: Path, lock_wait_s: float):
        writes_read, self.writes = Pipe(duplex=False)  # one way, parent -> helper: buffered writes
        self.calls, calls_child = Pipe()  # both ways: synchronous requests and their replies
        try:
            fcntl.fcntl(self.writes.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BUFFER_BYTES)
        except OSError:
            pass  # a smaller buffer only means a big send may wait for the helper to read
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH")) if p)
        self.owner_pid = os.getpid()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from storage.service import main; main(sys.argv[1:])",
                str(path),
                repr(float(lock_wait_s)),
                str(writes_read.fileno()),
                str(calls_child.fileno()),
                str(self.owner_pid),
            ],
            pass_fds=(writes_read.fileno(), calls_child.fileno()),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        writes_read.close()
        calls_child.close()
        self.write_lock = threading.Lock()
        self.call_lock = threading.Lock()
        self.request_ids = itertools.count()
        self.writes_sent = 0
        self.unconfirmed: dict[str, int] = {}  # run id -> number of its last write not yet confirmed by a reply

    def stop(self) -> int | None:
        """Close the pipes (the helper then writes what it holds and exits) and wait for it; kill it if it hangs.
        Returns its exit code. A forked copy of the owner leaves the owner's helper alone."""
        for connection in (self.writes, self.calls):
            try:
                connection.close()
            except OSError:
                pass
        if os.getpid() != self.owner_pid:
            return None
        try:
            return self.process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


class _Slot:
    """The client's current helper; the client's finalizer stops it without keeping the client alive."""

    def __init__(self):
        self.helper: _Helper | None = None
        self.lock = threading.Lock()

    def stop(self) -> None:
        with self.lock:
            helper, self.helper = self.helper, None
        if helper is not None:
            helper.stop()


class StoreClient:
    """Store's methods, executed by one helper process per client (see the module docstring). Share it between
    threads; create one per process (a forked child starts its own helper on first use)."""

    def __init__(self, path: str | Path, *, lock_wait_s: float = DEFAULT_LOCK_WAIT_S):
        self.path = Path(path).expanduser().resolve()
        self.lock_wait_s = lock_wait_s
        self._slot = _Slot()
        self._lost: dict[str, str] = {}  # run id -> why writes sent to a helper that died may be lost
        self._finalizer = weakref.finalize(self, self._slot.stop)

    @classmethod
    def default(cls) -> StoreClient:
        """The client for the store in the studio home folder (COOKBOOK_HOME)."""
        return cls(db_path())

    def __repr__(self) -> str:
        return f"StoreClient({str(self.path)!r})"

    def close(self) -> None:
        """Write what the helper holds and stop it; a later call starts a new one."""
        self._slot.stop()

    def helper_pid(self) -> int | None:
        """The running helper's process id (None before the first call): for tests and diagnostics."""
        helper = self._slot.helper
        return helper.process.pid if helper is not None else None

    # --- plumbing ---------------------------------------------------------------------------------------------

    def _helper(self) -> _Helper:
        with self._slot.lock:
            helper = self._slot.helper
            if helper is not None and helper.owner_pid != os.getpid():
                helper = None  # a forked copy of the client: start our own, leave the parent's alone
            if helper is None:
                helper = self._slot.helper = _Helper(self.path, self.lock_wait_s)
            return helper

    def _died(self, helper: _Helper) -> StorageServiceError:
        """Forget a helper whose pipe broke, reap it, and say so; its unconfirmed writes are reported per run."""
        with self._slot.lock:
            if self._slot.helper is helper:
                self._slot.helper = None
        if helper.process.poll() is None:
            helper.process.kill()
        code = helper.stop()
        message = (
            f"the storage helper process (pid {helper.process.pid}) for {self.path} ended unexpectedly "
            f"(exit code {code})"
        )
        for run_id in list(helper.unconfirmed):
            self._lost[run_id] = (
                f"{message}; metrics, transcripts or progress of run {run_id!r} sent since its last flush may be lost"
            )
        return StorageServiceError(message + "; the next call starts a new one")

    def _raise_lost(self, run_id: str | None) -> None:
        if run_id is not None and run_id in self._lost:
            raise StorageWriteError(self._lost.pop(run_id))

    def _send_write(self, kind: str, run_id: str, payload: Any) -> None:
        """Hand a checked write to the helper without waiting for it to be applied."""
        self._raise_lost(run_id)
        helper = self._helper()
        try:
            with helper.write_lock:
                helper.writes.send((kind, run_id, payload))
                helper.writes_sent += 1
                helper.unconfirmed[run_id] = helper.writes_sent
        except (OSError, EOFError):
            raise self._died(helper) from None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run Store.<method>(*args, **kwargs) in the helper and return its result (or raise its exception)."""
        self._raise_lost(_failed_write_run(method, args, kwargs))
        helper = self._helper()
        confirmed_upto = helper.writes_sent  # the helper applies these before answering (except run_status)
        try:
            with helper.call_lock:
                request_id = next(helper.request_ids)
                helper.calls.send((request_id, method, args, kwargs))
                while True:  # a reply left behind by a call interrupted (Ctrl-C) while waiting is skipped
                    reply_id, ok, value = helper.calls.recv()
                    if reply_id == request_id:
                        break
        except (OSError, EOFError):
            raise self._died(helper) from None
        if method != "run_status":
            with helper.write_lock:
                for run_id, last in list(helper.unconfirmed.items()):
                    if last <= confirmed_upto:
                        del helper.unconfirmed[run_id]
        if not ok:
            raise value
        return value

    # --- runs -------------------------------------------------------------------------------------------------

    def schema_version(self) -> int:
        return self._call("schema_version")

    def create_run(
        self,
        run_id: str,
        *,
        name: str,
        kind: str,
        backend: str,
        base_model: str,
        config: dict,
        log_dir: str | Path,
        status: str = RunStatus.QUEUED,
        parent_run_id: str | None = None,
        parent_checkpoint: str | None = None,
        total_steps: int | None = None,
    ) -> None:
        self._call(
            "create_run",
            run_id,
            name=name,
            kind=kind,
            backend=backend,
            base_model=base_model,
            config=config,
            log_dir=log_dir,
            status=status,
            parent_run_id=parent_run_id,
            parent_checkpoint=parent_checkpoint,
            total_steps=total_steps,
        )

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Store.update_run; with only step/total_steps (progress) it is buffered, otherwise it waits."""
        if fields and set(fields) <= HOT_RUN_FIELDS:
            self._send_write("run_fields", run_id, clean_run_fields(run_id, fields))
        else:
            self._call("update_run", run_id, **fields)

    def claim_run(self, run_id: str, owner_pid: int | None = None) -> None:
        """Store.claim_run for this process (not the helper): its pid is the run's owner."""
        self._call("claim_run", run_id, owner_pid=owner_pid or os.getpid())

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        return self._call("get_run", run_id)

    def run_status(self, run_id: str) -> str | None:
        """The run's status as the helper last read it: about FLUSH_INTERVAL_S old for a run polled every second
        or so, never more than STATUS_REFRESH_S; cheap to poll."""
        return self._call("run_status", run_id)

    def list_runs(self) -> list[dict[str, Any]]:
        return self._call("list_runs")

    def delete_run(self, run_id: str) -> None:
        self._call("delete_run", run_id)

    def mark_orphans_interrupted(self) -> list[str]:
        return self._call("mark_orphans_interrupted")

    # --- metrics ----------------------------------------------------------------------------------------------

    def log_metrics(self, run_id: str, step: int, metrics: Mapping[str, Any]) -> None:
        """Store.log_metrics, buffered: checked here, applied by the helper within FLUSH_INTERVAL_S."""
        table = metrics_table(run_id, step, metrics)
        if table.num_rows:
            self._send_write("metrics", run_id, table)

    def log_metrics_bulk(self, run_id: str, frame: pd.DataFrame) -> None:
        self._call("log_metrics_bulk", run_id, frame)

    def get_metrics(self, run_id: str, names: list[str] | None = None) -> pd.DataFrame:
        return self._call("get_metrics", run_id, names)

    def get_metrics_wide(self, run_id: str) -> pd.DataFrame:
        return self._call("get_metrics_wide", run_id)

    def metric_names(self, run_id: str) -> list[str]:
        return self._call("metric_names", run_id)

    def last_metrics(self, run_ids: list[str], name: str) -> dict[str, float]:
        return self._call("last_metrics", list(run_ids), name)

    def max_step(self, run_id: str) -> int | None:
        return self._call("max_step", run_id)

    def delete_metrics_after(self, run_id: str, step: int) -> None:
        self._call("delete_metrics_after", run_id, step)

    # --- checkpoints ------------------------------------------------------------------------------------------

    def add_checkpoint(
        self,
        run_id: str,
        *,
        step: int,
        name: str,
        kind: str,
        state_path: str | None = None,
        sampler_path: str | None = None,
        loop_state: dict | None = None,
    ) -> None:
        self._call(
            "add_checkpoint",
            run_id,
            step=step,
            name=name,
            kind=kind,
            state_path=state_path,
            sampler_path=sampler_path,
            loop_state=loop_state,
        )

    def list_checkpoints(self, run_id: str | None = None) -> list[dict[str, Any]]:
        return self._call("list_checkpoints", run_id)

    def last_checkpoint(self, run_id: str, kind_with_state: bool = True) -> dict[str, Any] | None:
        return self._call("last_checkpoint", run_id, kind_with_state)

    # --- transcripts ------------------------------------------------------------------------------------------

    def add_transcripts(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        """Store.add_transcripts, buffered: checked here, applied by the helper within FLUSH_INTERVAL_S."""
        if rows:
            self._send_write("transcripts", run_id, transcripts_table(run_id, rows))

    def get_transcripts(
        self,
        run_id: str,
        step: int | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        limit: int | None = None,
    ) -> pd.DataFrame:
        return self._call("get_transcripts", run_id, step, min_reward, max_reward, limit)

    def transcript_steps(self, run_id: str) -> list[int]:
        return self._call("transcript_steps", run_id)

    def delete_transcripts_after(self, run_id: str, step: int) -> None:
        self._call("delete_transcripts_after", run_id, step)

    # --- datasets and batches ---------------------------------------------------------------------------------

    def register_dataset(
        self, name: str, *, kind: str, source: str, path: str | Path, num_rows: int | None, meta: dict | None = None
    ) -> None:
        self._call("register_dataset", name, kind=kind, source=source, path=path, num_rows=num_rows, meta=meta)

    def list_datasets(self) -> list[dict[str, Any]]:
        return self._call("list_datasets")

    def delete_dataset(self, name: str) -> None:
        self._call("delete_dataset", name)


# ----------------------------------------------------------------------------------------------------------------
# The helper side (the only process that opens the database for a client)


class _Service:
    """The helper's state: buffered writes, the statuses of polled runs, failed writes not yet reported."""

    def __init__(self, store: Store, writes: Connection, calls: Connection, parent_pid: int):
        self.store = store
        self.writes = writes
        self.calls = calls
        self.parent_pid = parent_pid
        self.buffer: list[tuple[str, str, Any]] = []
        self.oldest_at: float | None = None  # when the oldest buffered write arrived
        self.polled: dict[str, float] = {}  # run id -> when run_status last asked for it
        self.statuses: dict[str, str | None] = {}
        self.read_at = float("-inf")  # when self.statuses was read
        self.failed: dict[str, str] = {}  # run id -> why its buffered writes failed (reported once)
        self.sync_after_reply = False  # a poll found the statuses old: sync once it is answered
        self.stopping = False  # set by SIGTERM

    def serve(self) -> None:
        try:
            while self._serve_once():
                pass
        finally:
            self._drain_writes()
            self._sync()
            for message in self.failed.values():
                print(f"cookbook storage helper: {message}", file=sys.stderr, flush=True)

    def _serve_once(self) -> bool:
        """Wait for a message or the next flush; False when the parent is gone or asked to stop."""
        ready = wait([self.writes, self.calls], timeout=self._seconds_to_next_sync())
        if not self._drain_writes():
            return False  # end of file: the parent closed the client or ended (even by SIGKILL)
        if self.calls in ready:
            try:
                request = self.calls.recv()
            except EOFError:
                return False
            self._drain_writes()  # writes sent before this request are all in the pipe by now
            self._answer(*request)
        if self.sync_after_reply or self._sync_due():
            self._sync()
        return not self.stopping and os.getppid() == self.parent_pid

    def _drain_writes(self) -> bool:
        while self.writes.poll():
            try:
                self.buffer.append(self.writes.recv())
            except EOFError:
                return False
            if self.oldest_at is None:
                self.oldest_at = time.monotonic()
        return True

    def _watched(self) -> list[str]:
        now = time.monotonic()
        self.polled = {run_id: at for run_id, at in self.polled.items() if now - at < WATCH_S}
        return list(self.polled)

    def _sync_due(self) -> bool:
        now = time.monotonic()
        writes_due = self.oldest_at is not None and now - self.oldest_at >= FLUSH_INTERVAL_S
        return writes_due or (bool(self._watched()) and now - self.read_at >= STATUS_REFRESH_S)

    def _seconds_to_next_sync(self) -> float:
        now = time.monotonic()
        due = [now + FLUSH_INTERVAL_S]  # wake up at least this often to notice a vanished parent
        if self.oldest_at is not None:
            due.append(self.oldest_at + FLUSH_INTERVAL_S)
        if self.polled:
            due.append(self.read_at + STATUS_REFRESH_S)
        return max(0.0, min(due) - now)

    def _sync(self) -> None:
        """Apply the buffered writes in one transaction and read the polled runs' statuses in it. If the batch
        fails, each run's writes are tried on their own, so one run's failure does not cost another its writes."""
        self.sync_after_reply = False
        watched = self._watched()
        if not self.buffer and not watched:
            return
        writes, self.buffer, self.oldest_at = self.buffer, [], None
        self.read_at = time.monotonic()
        try:
            self.statuses = self.store.write_batch(writes, watched)
            return
        except Exception:
            if not writes:
                self.statuses = {}
                return
        for run_id in dict.fromkeys(run_id for _, run_id, _ in writes):
            try:
                self.store.write_batch([write for write in writes if write[1] == run_id])
            except Exception as exc:
                self.failed[run_id] = (
                    f"storing the buffered metrics, transcripts or progress of run {run_id!r} "
                    f"failed: {type(exc).__name__}: {exc}"
                )
        try:
            self.statuses = self.store.write_batch([], watched)
        except Exception:
            self.statuses = {}

    def _run_status(self, run_id: str) -> str | None:
        """From memory; the first poll of a run (or one after a long pause) reads it first."""
        now = time.monotonic()
        self.polled[run_id] = now
        if run_id not in self.statuses or now - self.read_at > STATUS_REFRESH_S:
            self._sync()
        elif now - self.read_at >= FLUSH_INTERVAL_S:
            self.sync_after_reply = True
        return self.statuses.get(run_id)

    def _execute(self, method: str, args: tuple, kwargs: dict) -> Any:
        """One call: flush first (reads see every earlier write, writes apply in the order they were made; only
        run_status is answered from memory), then report the run's failed buffered writes, then run it."""
        if method == "run_status":
            status = self._run_status(args[0])
        elif self.buffer:
            self._sync()
        run_id = _failed_write_run(method, args, kwargs)
        if run_id in self.failed:
            raise StorageWriteError(self.failed.pop(run_id))
        if method == "run_status":
            return status
        if method.startswith("_") or not callable(getattr(Store, method, None)):
            raise AttributeError(f"the storage helper has no method {method!r}")
        result = getattr(self.store, method)(*args, **kwargs)
        if method in _CHANGES_STATUS:
            self.statuses.pop(args[0], None)  # the run's status may have changed: run_status reads it again
        elif method == "mark_orphans_interrupted":
            for orphan in result:
                self.statuses.pop(orphan, None)
        return result

    def _answer(self, request_id: int, method: str, args: tuple, kwargs: dict) -> None:
        try:
            reply = (request_id, True, self._execute(method, args, kwargs))
        except Exception as exc:
            reply = (request_id, False, exc)
        try:
            self.calls.send(reply)
        except (OSError, EOFError):
            self.stopping = True  # the parent is gone; its writes are still read to the end
        except Exception as exc:  # a result or exception that does not pickle
            try:
                self.calls.send(
                    (
                        request_id,
                        False,
                        RuntimeError(
                            f"{type(reply[2]).__name__}: {reply[2]} (the storage helper could not send it back: {exc})"
                        ),
                    )
                )
            except (OSError, EOFError):
                self.stopping = True


def main(argv: list[str]) -> None:
    """The helper process: `main([db_path, lock_wait_s, writes_fd, calls_fd, parent_pid])`."""
    import signal

    path, lock_wait_s, writes_fd, calls_fd, parent_pid = argv
    service = _Service(
        Store(path, lock_wait_s=float(lock_wait_s)),
        Connection(int(writes_fd), writable=False),
        Connection(int(calls_fd)),
        int(parent_pid),
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the parent, which then closes us

    def stop(signum, frame):
        service.stopping = True  # leave the loop within FLUSH_INTERVAL_S, writing what is buffered

    signal.signal(signal.SIGTERM, stop)
    service.serve()
