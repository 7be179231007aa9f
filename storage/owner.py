"""The owner process of one studio database: it holds the only DuckDB connection to the file and runs every store
call that other processes send it (storage/client.py), one at a time, each in its own transaction.

Started by the first process that needs the database (`python -m storage.owner DB LOCK_FD`, see
storage.client.connect), it forks once so that it is nobody's child, and then:
1. keeps the flock on `<db>.owner.lock` that the starting process took and handed over: while it lives no other
   owner can start, and when it dies (even by SIGKILL) the kernel frees the lock, so the next caller knows;
2. opens the file (migrating a file of an older layout), listens on a Unix socket (`<db>.owner.sock`, or under the
   temp folder when that path is too long for a socket) with a fresh random authkey, and writes both to
   `<db>.owner.json` (mode 0600) for callers to find;
3. says "ready" (or "error: ..." when it cannot start) on its stdout to the process that started it;
4. serves each connection on a thread, running one call at a time; it stops after IDLE_S seconds without a call
   (COOKBOOK_STORAGE_IDLE_S), on SIGTERM, on a "stop" message or when DuckDB invalidates its connection (a fatal
   error): it finishes the calls in flight, answers every later one with ("bye",) (not run: the caller sends it to
   the next owner), closes the database and its files.

Not here: SQL (storage/db.py, storage/evals.py), the calling side (storage/client.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import secrets
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from storage import client
from storage.client import BYE, PROTOCOL, owner_files

IDLE_ENV = "COOKBOOK_STORAGE_IDLE_S"
IDLE_S = 60.0  # an owner without a call for this long stops; the next call starts a new one (~1 s)
_SOCKET_PATH_MAX = 100  # bytes; a Unix socket path must fit in 108 (sun_path)


def log(message: str) -> None:
    print(f"{datetime.now().isoformat(timespec='seconds')} storage owner {os.getpid()}: {message}", file=sys.stderr)


def socket_address(db: Path) -> str:
    """`<db>.owner.sock`, or a socket in a private temp folder named after the database when that path is long."""
    path = owner_files(db)["sock"]
    if len(os.fsencode(path)) <= _SOCKET_PATH_MAX:
        return str(path)
    folder = Path(tempfile.gettempdir()) / f"cookbook-storage-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return str(folder / f"{hashlib.sha256(os.fsencode(db)).hexdigest()[:24]}.sock")


def _write_private(path: Path, text: str) -> None:
    """Write a file only this user can read, atomically (a reader sees the old file or the new one)."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.replace(partial, path)


class Owner:
    """Serves calls to `targets` ({"Store": the owned Store, "EvalStore": ...}) over `listener`."""

    def __init__(self, db: Path, targets: dict[str, Any], listener: Listener, idle_s: float):
        self.db = db
        self.targets = targets
        self.listener = listener
        self.idle_s = idle_s
        self.state = threading.Condition()  # guards the four fields below
        self.in_flight = 0
        self.last_call = time.monotonic()
        self.stopping = False
        self.connections: dict[Connection, threading.Lock] = {}  # each with the lock its replies are sent under
        self.run_lock = threading.Lock()  # one call at a time on the one DuckDB connection
        self.stopped = threading.Event()

    def serve_until_stopped(self) -> None:
        threading.Thread(target=self._accept_forever, daemon=True).start()
        while not self.stopped.wait(1.0):
            self.stop(if_idle=True)

    def _accept_forever(self) -> None:
        while True:
            try:
                connection = self.listener.accept()  # checks the authkey
            except Exception as exc:  # a caller that died or had the wrong key: not a reason to stop
                if self.stopped.is_set():
                    return
                log(f"refused a connection: {type(exc).__name__}: {exc}")
                continue
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: Connection) -> None:
        send_lock = threading.Lock()
        with self.state:
            self.connections[connection] = send_lock
        try:
            hello = connection.recv()
            if not self._begin():
                return self._send(connection, send_lock, BYE)
            self._send(connection, send_lock, ("hello", PROTOCOL, os.getpid()))
            self._end()
            if hello[:2] != ("hello", PROTOCOL):
                return None  # the caller raises, naming both versions
            while self._serve_call(connection, send_lock, connection.recv_bytes()):
                pass
        except (EOFError, OSError):
            pass  # the caller closed the connection (or ended)
        finally:
            with self.state:
                self.connections.pop(connection, None)
            connection.close()
        return None

    def _serve_call(self, connection: Connection, send_lock: threading.Lock, request: bytes) -> bool:
        if not self._begin():
            self._send(connection, send_lock, BYE)  # not run: the caller sends it to the next owner
            return False
        try:
            reply = self._run(request)
            with send_lock:
                connection.send_bytes(reply)
        finally:
            self._end()
        return True

    def _begin(self) -> bool:
        """Count a call in flight; False once stopping (the call must not run)."""
        with self.state:
            if self.stopping:
                return False
            self.in_flight += 1
            return True

    def _end(self) -> None:
        with self.state:
            self.in_flight -= 1
            self.last_call = time.monotonic()
            self.state.notify_all()

    @staticmethod
    def _send(connection: Connection, send_lock: threading.Lock, message: tuple) -> None:
        try:
            with send_lock:
                connection.send(message)
        except OSError:
            pass

    def _run(self, request: bytes) -> bytes:
        """One call, as the pickled reply ("ok", value) or ("error", exception)."""
        qualname = "?"
        try:
            qualname, args, kwargs = pickle.loads(request)
            reply: tuple = ("ok", self._call(qualname, args, kwargs))
        except Exception as exc:
            reply = ("error", exc)
            if type(exc).__name__ == "FatalException":  # DuckDB invalidated the connection (a disk error, ...)
                log(f"{qualname}: {exc}; stopping so that the next call reopens the file")
                threading.Thread(target=self.stop, daemon=True).start()
        try:
            return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a result or an exception that does not pickle
            what = f"{type(reply[1]).__name__}: {reply[1]}"
            return pickle.dumps(("error", RuntimeError(f"{qualname}: {what} (the owner could not send it: {exc})")))

    def _call(self, qualname: str, args: tuple, kwargs: dict) -> Any:
        if qualname == "stop":
            threading.Thread(target=self.stop, daemon=True).start()  # after this reply (stop waits for it)
            return None
        target_name, _, name = qualname.partition(".")
        target = self.targets.get(target_name)
        method: Callable | None = getattr(type(target), name, None)
        if target is None or not getattr(method, "__in_owner__", False):
            raise AttributeError(f"the storage owner runs no {qualname!r}")
        with self.run_lock:
            return getattr(target, name)(*args, **kwargs)

    def stop(self, if_idle: bool = False) -> None:
        """Stop serving: let the calls in flight finish, then say bye on every connection (a call that comes
        later gets bye too and is not run). With if_idle, only when no call came for idle_s seconds."""
        with self.state:
            idle = self.in_flight == 0 and time.monotonic() - self.last_call >= self.idle_s
            if self.stopping or (if_idle and not idle):
                return
            self.stopping = True
            self.state.wait_for(lambda: self.in_flight == 0)
            connections = list(self.connections.items())
        for connection, send_lock in connections:
            self._send(connection, send_lock, BYE)
        log("stopping" + (f" after {self.idle_s:g} s without a call" if if_idle else ""))
        self.stopped.set()


def start(db: Path) -> tuple[Owner, Any]:
    """Open the database and listen: the Owner and the DuckDB connection (to close when it stops)."""
    from storage.db import Store, open_database
    from storage.evals import EvalStore

    files = owner_files(db)
    con = open_database(db)
    address = socket_address(db)
    if os.path.exists(address):
        os.unlink(address)  # left by an owner that died: we hold the lock, so nobody listens on it
    authkey = secrets.token_bytes(32)
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    os.chmod(address, 0o600)
    store = Store.owned(db, con)
    idle_s = float(os.environ.get(IDLE_ENV) or IDLE_S)
    owner = Owner(db, {"Store": store, "EvalStore": EvalStore(store)}, listener, idle_s)
    info = {"protocol": PROTOCOL, "pid": os.getpid(), "address": address, "authkey": authkey.hex()}
    _write_private(files["json"], json.dumps(info))
    return owner, con


def main(argv: list[str]) -> None:
    """`python -m storage.owner DB LOCK_FD`: LOCK_FD is the owner lock file, already locked by the caller."""
    db = Path(argv[0])
    if os.fork() > 0:
        os._exit(0)  # the launcher ends at once; the owner (its child) is adopted by init and never a zombie
    client.IN_OWNER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        owner, con = start(db)
    except Exception as exc:
        _say(f"error: {type(exc).__name__}: {exc}")
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except OSError:
            pass  # the log is on the disk that failed
        os._exit(1)
    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=owner.stop, daemon=True).start())
    log(f"owns {db}, listening on {owner.listener.address}")
    _say("ready")
    owner.serve_until_stopped()
    for path in (owner_files(db)["json"], Path(str(owner.listener.address))):
        path.unlink(missing_ok=True)  # before the lock is freed (at exit), so a new owner finds no stale json
    try:
        con.close()
    except Exception as exc:  # an invalidated database closes with an error; what was committed is in the file
        log(f"closing the database: {type(exc).__name__}: {exc}")
    log("stopped")
    sys.stderr.flush()
    os._exit(0)  # frees the lock; daemon threads blocked in recv end with the process


def _say(line: str) -> None:
    """One line to the process that started the owner; stdout is closed after it."""
    os.write(1, (line.replace("\n", " ") + "\n").encode())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


if __name__ == "__main__":
    main(sys.argv[1:])
