"""One owner per database (storage/owner.py, storage/client.py): every process's calls run in one owner process,
which the first caller starts; racing starters make exactly one; a killed owner is replaced by the next call, an
idle or stopped one too without losing a call; an owner that cannot start says why and names the home; another
protocol version is refused by name; a home of the old layout (and one with a dead owner's files) still opens; bad
input raises in the calling process; a cancel made by another process reaches the loop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import psutil
import pytest

from cookbook_engine.runs import RunContext
from cookbook_engine.training.run_logger import RunLogger
from storage import StorageOwnerError, Store, client, stop_owner
from storage.client import owner_files, read_owner_info
from storage.evals import EvalStore
from storage.schema import MIGRATIONS

REPO = Path(__file__).resolve().parent.parent


def make_run(store: Store, run_id: str, log_dir: Path, status: str = "running") -> None:
    store.create_run(
        run_id, name=run_id, kind="rl", backend="local", base_model="m", config={}, log_dir=log_dir, status=status
    )


def transcript_rows(step: int, count: int = 8) -> list[dict]:
    return [dict(step=step, group_idx=0, sample_idx=i, prompt="Q", completion=f"A{step}.{i}") for i in range(count)]


def owner_pid(db: Path) -> int:
    info = read_owner_info(db)
    assert info is not None, "no owner is running"
    return info["pid"]


def gone(pid: int) -> bool:
    """The process has ended: every one of its threads is a zombie or gone. (Its main thread turns zombie while the
    others may still be exiting and holding its sockets open, so checking that one alone is not enough.)"""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return True
    for task in tasks:
        try:
            state = Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in ("Z", "X"):
            return False
    return True


def wait_for(condition, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not true within {within_s} s"
        time.sleep(0.05)


def child(code: str, db: Path, **popen) -> subprocess.Popen:
    """A process that imports only storage and runs `code` with `store = Store(db)`."""
    script = (
        "import os, sys, time\nfrom storage import Store\n" + f"store = Store({str(db)!r})\n" + textwrap.dedent(code)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", script], env=env, text=True, **popen)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "home" / "studio.duckdb"
    yield path
    stop_owner(path)


def test_one_owner_runs_every_process_calls_and_a_training_loop_never_opens_duckdb(db, tmp_path, monkeypatch):
    connects = []
    real_connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: connects.append(a) or real_connect(*a, **k))
    store = Store(db)
    make_run(store, "rl-1", tmp_path / "rl-1")
    logger = RunLogger(store, "rl-1", tmp_path / "rl-1")
    ctx = RunContext("rl-1", store, logger, logger.log_dir)
    for step in range(5):  # what a loop does every step: metrics, transcripts, progress, cancel polling
        logger.log_metrics(step, {"loss": 1.0 / (step + 1)})
        logger.log_transcripts(transcript_rows(step))
        ctx.progress(step + 1, 5)
        ctx._last_poll = 0.0
        assert not ctx.cancelled()
    writer = child('store.log_metrics("rl-1", 5, {"loss": 0.1}); print(store.get_run("rl-1")["step"])', db, stdout=-1)
    assert writer.communicate(timeout=120)[0].strip() == "5" and writer.returncode == 0
    assert connects == []  # this process never opened the file; the owner did
    assert store.get_metrics("rl-1", ["loss"])["step"].tolist() == [0, 1, 2, 3, 4, 5]
    assert len(store.get_transcripts("rl-1")) == 5 * 8
    pid = owner_pid(db)
    assert pid != os.getpid() and os.getppid() != pid
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "duckdb" in maps and "libtorch" not in maps  # the owner imports storage only
    assert str(db) in (db.parent / "studio.duckdb.owner.log").read_text()


def test_processes_racing_to_start_an_owner_start_exactly_one(db):
    db.parent.mkdir(parents=True)
    go = db.parent / "go"
    code = """
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.005)
        store.schema_version()
        from storage.client import read_owner_info
        print(read_owner_info(store.path)["pid"])
    """
    racers = [child(code.replace("sys.argv[1]", repr(str(go))), db, stdout=-1) for _ in range(6)]
    time.sleep(2.0)  # let them all start Python and wait at the line
    go.touch()
    pids = {racer.communicate(timeout=180)[0].strip() for racer in racers}
    assert all(racer.returncode == 0 for racer in racers)
    assert len(pids) == 1
    assert (db.parent / "studio.duckdb.owner.log").read_text().count(" owns ") == 1


def test_a_killed_owner_is_replaced_by_the_next_call_and_its_files_are_recognised_as_stale(db, tmp_path):
    store = Store(db)
    make_run(store, "r", tmp_path)
    store.log_metrics("r", 0, {"loss": 1.0})
    first = owner_pid(db)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: gone(first), 10)
    assert owner_files(db)["json"].exists() and owner_files(db)["sock"].exists()  # left behind by the dead owner
    store.log_metrics("r", 1, {"loss": 0.5})  # the pooled connection is dead: the call starts a new owner
    assert owner_pid(db) != first
    assert store.get_metrics("r")["step"].tolist() == [0, 1]  # what the killed owner had committed is kept


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def kill_once_busy(pid: int, cpu_s: float, timeout_s: float = 120) -> None:
    """SIGKILL `pid` once it has used `cpu_s` more seconds of CPU than now (it is working on a call)."""
    start, deadline = cpu_seconds(pid), time.monotonic() + timeout_s
    while cpu_seconds(pid) - start < cpu_s and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)


def test_a_call_in_flight_when_its_owner_dies_says_so_and_the_next_call_works(db, tmp_path):
    store = Store(db)
    make_run(store, "r", tmp_path)
    pid = owner_pid(db)
    steps = np.repeat(np.arange(100_000), 20)
    frame = pd.DataFrame({"step": steps, "name": np.tile([f"m{i}" for i in range(20)], 100_000), "value": 1.0})
    # the owner dies while inserting 2,000,000 points: once it has spent 0.3 s of CPU on them, not after a fixed
    # time (on a quiet machine 400,000 points were in before a 0.5 s timer fired; under load, before they were sent)
    threading.Thread(target=kill_once_busy, args=(pid, 0.3), daemon=True).start()
    with pytest.raises(StorageOwnerError, match=f"studio home {db.parent}.* ended during Store._append"):
        store.log_metrics_bulk("r", frame)
    wait_for(lambda: gone(pid), 10)
    assert store.get_run("r")["run_id"] == "r" and owner_pid(db) != pid


def test_an_idle_owner_stops_and_a_stopping_owner_loses_no_call(db, tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_STORAGE_IDLE_S", "1")
    store = Store(db)
    make_run(store, "r", tmp_path)
    first = owner_pid(db)
    wait_for(lambda: gone(first), 15)
    assert not owner_files(db)["json"].exists() and not owner_files(db)["sock"].exists()
    errors: list[BaseException] = []
    steps: list[int] = []
    stopped = threading.Event()

    def writer():
        try:
            while not stopped.is_set() or len(steps) < 50:
                store.log_metrics("r", len(steps), {"loss": 1.0})
                steps.append(len(steps))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    stops = 0
    while stops < 3 and thread.is_alive():  # stop the owner under the writer, three times
        time.sleep(0.2)
        stops += stop_owner(db)
    stopped.set()
    thread.join()
    assert errors == [] and stops == 3
    assert store.get_metrics("r")["step"].tolist() == steps


HOLD_THE_FILE = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
"""


def test_an_owner_that_cannot_start_says_why_and_names_the_home(db, tmp_path):
    make_run(Store(db), "r", tmp_path)
    stop_owner(db)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_FILE, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StorageOwnerError, match=f"studio home {db.parent}.*could not start: IOException.*lock"):
            Store(db).get_run("r")
    finally:
        holder.communicate("\n", timeout=30)
    assert Store(db).get_run("r")["run_id"] == "r"  # the file is free again: the next call starts an owner


def test_an_owner_of_another_protocol_version_is_refused_with_both_versions(db, monkeypatch):
    Store(db).schema_version()
    monkeypatch.setattr(client, "PROTOCOL", 99)
    monkeypatch.setattr(client, "_pools", {})
    with pytest.raises(StorageOwnerError, match=r"speaks storage protocol 1, this code 99"):
        Store(db).schema_version()


def test_a_home_of_the_old_layout_and_a_long_path_open(tmp_path):
    db = tmp_path / "old-home" / "studio.duckdb"  # the first schema, no owner files: as the old design left it
    db.parent.mkdir()
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)")
        con.execute(MIGRATIONS[0])
        con.execute("INSERT INTO schema_version VALUES (1, now())")
        con.execute(
            "INSERT INTO runs (run_id, name, kind, status, backend, base_model, config, created_at, updated_at, "
            "log_dir) VALUES ('old', 'old', 'sl', 'completed', 'local', 'm', '{}', now(), now(), '/x')"
        )
    store = Store(db)
    try:
        assert store.get_run("old")["status"] == "completed" and store.schema_version() == len(MIGRATIONS)
    finally:
        stop_owner(db)
    deep = tmp_path / ("a-rather-long-folder-name-" * 5) / "studio.duckdb"  # too long for a socket beside it
    try:
        Store(deep).schema_version()
        assert not owner_files(deep)["sock"].exists() and Path(read_owner_info(deep)["address"]).exists()
    finally:
        stop_owner(deep)


def test_bad_input_raises_in_the_calling_process_and_writes_nothing(db, tmp_path):
    store = Store(db)
    make_run(store, "rl-1", tmp_path)
    with pytest.raises(TypeError, match="metric 'loss'"):
        store.log_metrics("rl-1", 0, {"loss": "nan-ish"})
    with pytest.raises(TypeError, match="step of run 'rl-1' must be an integer"):
        store.log_metrics("rl-1", 0.5, {"loss": 1.0})
    with pytest.raises(ValueError, match="missing keys \\['completion'\\]"):
        store.add_transcripts("rl-1", [dict(step=0, group_idx=0, sample_idx=0, prompt="Q")])
    with pytest.raises(TypeError, match="step of run 'rl-1' must be an integer"):
        store.update_run("rl-1", step="3")
    with pytest.raises(ValueError, match="already exists"):  # raised in the owner: same type and message here
        make_run(store, "rl-1", tmp_path)
    with pytest.raises(KeyError, match="no run 'gone'"):
        store.update_run("gone", step=1)
    assert store.get_metrics("rl-1").empty and store.get_transcripts("rl-1").empty
    assert store.get_run("rl-1")["step"] is None


def test_writes_made_right_before_a_sigkill_of_the_writer_are_all_stored(db, tmp_path):
    make_run(Store(db), "rl-1", tmp_path)
    writer = child(
        """
        for step in range(20):
            store.log_metrics("rl-1", step, {"loss": 1.0 / (step + 1)})
            store.add_transcripts("rl-1", [dict(step=step, group_idx=0, sample_idx=i, prompt="Q", completion="A")
                                           for i in range(8)])
            store.update_run("rl-1", step=step + 1, total_steps=20)
        os.kill(os.getpid(), 9)
    """,
        db,
    )
    assert writer.wait(timeout=120) == -signal.SIGKILL
    store = Store(db)
    assert store.get_metrics("rl-1", ["loss"])["step"].tolist() == list(range(20))
    assert len(store.get_transcripts("rl-1")) == 20 * 8 and store.get_run("rl-1")["step"] == 20


def test_a_cancel_from_another_process_is_seen_by_the_loop(tmp_path):
    home = tmp_path / "home"
    studio = Store(home / "studio.duckdb")
    make_run(studio, "sl-1", home / "runs" / "sl-1")
    ctx = RunContext("sl-1", studio, RunLogger(studio, "sl-1", home / "runs" / "sl-1"), home / "runs" / "sl-1")
    try:
        assert not ctx.cancelled()
        result = subprocess.run(
            [sys.executable, "-m", "cookbook_engine.cli", "cancel", "sl-1"],
            capture_output=True,
            text=True,
            env={**os.environ, "COOKBOOK_HOME": str(home)},
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        ctx._last_poll = 0.0
        assert ctx.cancelled()
    finally:
        stop_owner(studio.path)


def test_a_run_and_an_evaluation_belong_to_the_calling_process_not_to_the_owner(db, tmp_path):
    store = Store(db)
    make_run(store, "r", tmp_path, status="queued")
    store.claim_run("r")
    evals = EvalStore(store)
    evals.create_job("e", name="e", models=["m"], eval_sets=["s"], settings={}, total=1)
    evals.update_job("e", status="running")
    assert store.get_run("r")["owner_pid"] == evals.get_job("e")["owner_pid"] == os.getpid() != owner_pid(db)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    evals.create_job("orphan", name="o", models=["m"], eval_sets=["s"], settings={}, total=1)
    evals.update_job("orphan", status="running", owner_pid=dead.pid)
    assert evals.mark_orphans_interrupted() == ["orphan"]
    assert evals.get_job("orphan")["status"] == "interrupted" and evals.get_job("e")["status"] == "running"
