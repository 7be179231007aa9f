"""How a process talks to the one owner of a studio database: every `Store`/`EvalStore` method marked `@in_owner`
is sent here, run by the owner process (storage/owner.py), and its result or exception comes back.

A database file has one owner process, found through files beside the file (the studio home for the default one):
`<db>.owner.lock` (the owner holds an flock on it for its whole life), `<db>.owner.json` (its pid, socket address,
protocol version and the authkey of the socket, mode 0600) and `<db>.owner.log` (its stderr). To call it, a process
connects to the socket named in the json (multiprocessing.connection, authenticated with that key) and says hello
with its protocol version. When nobody answers, the caller takes the flock itself: if it gets it, no owner is alive
(a crash frees an flock, so a stale json or socket is recognised at once), and it starts `python -m storage.owner`
handing over the locked file, so exactly one of several racing processes starts an owner and the others wait for it.
If the flock is held, an owner is starting or stopping: wait and try again.

A call is one pickled message `(qualname, args, kwargs)` and one reply `("ok", value)` or `("error", exception)`.
Connections are pooled per process and database and used by one thread at a time. An owner that stops when idle
(or on SIGTERM, or on `stop_owner`) first finishes the calls in flight and answers every later one with `("bye",)`:
such a call was not run, so it is sent again to a fresh owner. An owner that dies while running a call (killed,
crashed) leaves that one call unknown: it raises StorageOwnerError, and the next call starts a new owner.

Not here: SQL (storage/db.py, storage/evals.py), serving (storage/owner.py).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from storage.home import HomeError

PROTOCOL = 1  # bump when a message's shape changes; the hello message ("hello", version, ...) never changes
START_TIMEOUT_S = 180.0  # how long a call waits for an owner to start (at load 30 Python starts in tens of seconds)
BYE = ("bye",)
_REPO = Path(__file__).resolve().parent.parent
_MAX_ATTEMPTS = 8  # a call meets at most this many owners stopping under it before it gives up
# An owner that cannot open the file for one of these reasons is stopped by the home, not by a bug: bad input.
_HOME_PROBLEMS = ("No space left on device", "Read-only file system", "Permission denied", "Disk quota exceeded")

IN_OWNER = False  # set by storage.owner in the owner process: there, @in_owner methods run as written


class StorageOwnerError(RuntimeError):
    """The owner process of a studio database could not be started or reached, or died during a call."""


# ---------------------------------------------------------------------------------------------------- the files


def owner_files(db: Path) -> dict[str, Path]:
    """The owner's files beside the database file."""
    return {suffix: db.with_name(f"{db.name}.owner.{suffix}") for suffix in ("lock", "json", "sock", "log")}


def read_owner_info(db: Path) -> dict[str, Any] | None:
    """The running owner's json (pid, address, protocol, authkey), None if there is none or it is half written."""
    try:
        return json.loads(owner_files(db)["json"].read_text())
    except (OSError, ValueError):
        return None


def home_of(db: Path) -> str:
    return f"studio home {db.parent} (database {db.name})"


# ------------------------------------------------------------------------------------------ the @in_owner mark


class _Owned(Protocol):
    @property
    def path(self) -> Path: ...


S = TypeVar("S", bound=_Owned)
P = ParamSpec("P")
R = TypeVar("R")


def in_owner(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Mark a store method as one the owner runs: in the owner process it runs as written, anywhere else the call
    goes to the owner of `self.path` (started on demand)."""
    qualname = method.__qualname__

    @functools.wraps(method)
    def run(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        if IN_OWNER:
            return method(self, *args, **kwargs)
        return call(self.path, qualname, args, kwargs)

    run.__in_owner__ = True  # type: ignore[attr-defined]  # what the owner checks before running a name it is sent
    return run


# --------------------------------------------------------------------------------------------- the connections


class _Pool:
    """This process's idle connections to the owner of one database."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[Connection] = []

    def take(self) -> Connection | None:
        """An idle connection whose owner has not said bye (nor ended) since its last call, or None."""
        while True:
            with self.lock:
                if not self.idle:
                    return None
                connection = self.idle.pop()
            try:
                if not connection.poll():  # an idle connection has nothing to read unless its owner stopped
                    return connection
            except OSError:
                pass
            connection.close()

    def give(self, connection: Connection) -> None:
        with self.lock:
            self.idle.append(connection)


_pools: dict[Path, _Pool] = {}
_pools_lock = threading.Lock()
_pools_pid = os.getpid()


def _pool(db: Path) -> _Pool:
    global _pools_pid
    with _pools_lock:
        if _pools_pid != os.getpid():  # a forked child: the parent's connections are not ours to use
            _pools.clear()
            _pools_pid = os.getpid()
        return _pools.setdefault(db, _Pool())


def call(db: Path, qualname: str, args: tuple, kwargs: dict) -> Any:
    """Run the store method `qualname` ("Store.get_run") in the owner of `db` and return its result or raise its
    exception. A call the owner declined because it was stopping is sent again to the next owner."""
    try:
        message = pickle.dumps((qualname, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(f"{qualname}: an argument cannot be sent to the storage owner: {exc}") from exc
    pool = _pool(db)
    for _ in range(_MAX_ATTEMPTS):
        connection = pool.take() or connect(db)
        reply = _exchange(db, connection, qualname, message)
        if reply == BYE:
            connection.close()
            continue
        pool.give(connection)
        status, value = reply
        if status == "ok":
            return value
        raise value
    raise StorageOwnerError(f"{qualname}: the storage owner of {home_of(db)} kept stopping; try again")


def _exchange(db: Path, connection: Connection, qualname: str, message: bytes) -> tuple:
    """Send one call and read its reply; BYE when it was not run (the owner stopped before reading it)."""
    try:
        connection.send_bytes(message)
    except OSError:
        return BYE  # nothing was sent: the owner of this pooled connection is gone
    try:
        return pickle.loads(connection.recv_bytes())
    except (EOFError, OSError):
        connection.close()
        raise StorageOwnerError(
            f"the storage owner of {home_of(db)} ended during {qualname}, which may or may not have been applied "
            f"(see {owner_files(db)['log']}); the next call starts a new owner"
        ) from None
    except BaseException:  # Ctrl-C while waiting: the reply would be left in the connection, so drop it
        connection.close()
        raise


def connect(db: Path) -> Connection:
    """A connection to the owner of `db` that has said hello; starts the owner when none is alive."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        connection = _hello(db)
        if connection is not None:
            return connection
        lock = _lock_if_no_owner(db)
        if lock is not None:
            _start_owner(db, lock, deadline)  # it holds the lock from now on; connect on the next turn
        elif time.monotonic() > deadline:
            info = read_owner_info(db) or {}
            raise StorageOwnerError(
                f"the storage owner of {home_of(db)} (pid {info.get('pid', '?')}) holds its lock but did not answer "
                f"within {START_TIMEOUT_S:g} s; see {owner_files(db)['log']}"
            )
        else:
            time.sleep(0.02)  # an owner is starting (its json is not written yet) or stopping


def _hello(db: Path) -> Connection | None:
    """A connection to the owner named in the json, None when there is none or it does not answer."""
    info = read_owner_info(db)
    if info is None:
        return None
    try:
        connection = Client(info["address"], family="AF_UNIX", authkey=bytes.fromhex(info["authkey"]))
    except (OSError, EOFError, KeyError, ValueError):
        return None  # a stale json (its owner died: nothing listens) or one being replaced
    try:
        connection.send(("hello", PROTOCOL))
        reply = connection.recv()
    except (OSError, EOFError):
        connection.close()
        return None
    if reply == BYE:
        connection.close()
        return None  # it is stopping: the next owner will answer
    if reply[:2] != ("hello", PROTOCOL):
        connection.close()
        raise StorageOwnerError(
            f"the storage owner of {home_of(db)} (pid {info.get('pid')}) speaks storage protocol {reply[1]}, this "
            f"code {PROTOCOL}: another version of cookbook-studio uses this home; stop it or wait until it is idle"
        )
    return connection


def _lock_if_no_owner(db: Path) -> int | None:
    """The owner lock file's descriptor, locked, if no owner holds it (None when one does)."""
    path = owner_files(db)["lock"]
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StorageOwnerError(f"{home_of(db)}: cannot create {path.name} ({exc.strerror or exc})") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _start_owner(db: Path, lock_fd: int, deadline: float) -> None:
    """Start `python -m storage.owner` with the locked file handed over; return once it listens. Raises
    StorageOwnerError with the owner's own words when it cannot start (the database is locked by a program that
    is not an owner, the file is damaged, ...)."""
    files = owner_files(db)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH")) if p)
    try:
        with open(files["log"], "ab") as log:
            launcher = subprocess.Popen(
                [sys.executable, "-m", "storage.owner", str(db), str(lock_fd)],
                pass_fds=(lock_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,  # Ctrl-C in the caller's terminal is not for the owner
            )
    finally:
        os.close(lock_fd)  # the owner holds the lock now (or, if it did not start, nobody does)
    assert launcher.stdout is not None
    try:
        said = _first_line(launcher.stdout.fileno(), deadline)
    finally:
        launcher.stdout.close()
        launcher.wait()  # the launcher forks the owner and exits at once: the owner is nobody's child
    if said != "ready":
        said = said.removeprefix("error: ") or "it ended without a word"
        if any(reason in said for reason in _HOME_PROBLEMS):
            raise HomeError(f"studio home {db.parent}: cannot open the database {db.name}: {said}")
        raise StorageOwnerError(f"the storage owner of {home_of(db)} could not start: {said} (its log: {files['log']})")


def _first_line(fd: int, deadline: float) -> str:
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return f"no answer within {START_TIMEOUT_S:g} s"
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def stop_owner(db: str | Path) -> bool:
    """Ask the owner of `db` to stop now (it finishes the calls in flight, closes the database and exits) and wait
    until it has; False when none was running. For tests and tools that open the file themselves."""
    db = Path(db).expanduser().resolve()
    connection = _hello(db)
    info = read_owner_info(db)
    if connection is None or info is None:
        return False
    try:
        connection.send_bytes(pickle.dumps(("stop", (), {})))
        connection.recv_bytes()
    except (EOFError, OSError):
        pass
    finally:
        connection.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        lock = _lock_if_no_owner(db)
        if lock is not None:
            os.close(lock)
            return True  # it has exited (the lock is freed at its exit)
        if (read_owner_info(db) or {}).get("pid", info["pid"]) != info["pid"]:
            return True  # it has exited and another caller has started the next owner
        time.sleep(0.02)
    raise StorageOwnerError(f"the storage owner of {home_of(db)} did not stop within {START_TIMEOUT_S:g} s")
