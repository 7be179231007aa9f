"""storage.service.StoreClient: the training process never opens DuckDB (the helper process does), buffered writes
reach other processes within seconds and survive a SIGKILL of the writer, bad input raises at the call site, a
write that fails later fails the run's next poll, cancel made by another process is seen, and a dead helper gives a
clear error and is replaced."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from cookbook_engine.runs import RunContext
from cookbook_engine.training.run_logger import RunLogger
from storage import StorageServiceError, StorageWriteError, Store, StoreClient
from storage.service import FLUSH_INTERVAL_S

REPO = Path(__file__).resolve().parent.parent
VISIBLE_WITHIN_S = FLUSH_INTERVAL_S + 3.0  # the flush interval plus a margin for a busy 2-core machine


def transcript_rows(step: int, count: int = 8) -> list[dict]:
    return [
        dict(step=step, group_idx=0, sample_idx=i, prompt="Q", completion=f"A{step}.{i}", reward=1.0)
        for i in range(count)
    ]


def make_run(store, run_id: str, log_dir: Path, status: str = "running") -> None:
    store.create_run(
        run_id,
        name=run_id,
        kind="rl",
        backend="local",
        base_model="SmolLM2-135M-Instruct",
        config={},
        log_dir=log_dir,
        status=status,
    )


def helper_gone(pid: int) -> bool:
    """True when the process no longer runs (a zombie counts: its parent, not this test, reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_for(condition, within_s: float, every_s: float = 0.05) -> float:
    """Seconds until condition() held; fails the test after within_s."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within_s, f"not true within {within_s} s"
        time.sleep(every_s)
    return time.monotonic() - started


@pytest.fixture
def client(tmp_path):
    store = StoreClient(tmp_path / "studio.duckdb")
    yield store
    store.close()


def run_child(code: str, db: Path) -> subprocess.Popen:
    """A writer process (imports only storage, like the helper) running `code` with `client` made for `db`."""
    script = (
        "import os, signal, sys, time\nfrom storage import StoreClient\n"
        f"client = StoreClient({str(db)!r})\n" + textwrap.dedent(code)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)


def test_a_training_loop_makes_no_duckdb_call_in_its_own_process(client, tmp_path, monkeypatch):
    connects = []
    real_connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: connects.append(a) or real_connect(*a, **k))
    make_run(client, "rl-1", tmp_path / "runs" / "rl-1")
    logger = RunLogger(client, "rl-1", tmp_path / "runs" / "rl-1")
    ctx = RunContext("rl-1", client, logger, logger.log_dir)
    for step in range(5):  # what a loop does every step: metrics, transcripts, progress, cancel polling
        logger.log_metrics(step, {"loss": 1.0 / (step + 1), "reward": 0.5})
        logger.log_transcripts(transcript_rows(step))
        ctx.progress(step + 1, 5)
        ctx._last_poll = 0.0  # poll the status every step (a loop polls at most once a second)
        assert not ctx.cancelled()
    client.update_run("rl-1", status="completed")  # waits; the helper flushes the buffered writes first
    assert connects == []  # every open happened in the helper process

    store = Store(tmp_path / "studio.duckdb")  # another reader sees everything once the run is completed
    assert store.get_run("rl-1")["status"] == "completed" and store.get_run("rl-1")["step"] == 5
    assert store.get_metrics("rl-1", ["loss"])["step"].tolist() == [0, 1, 2, 3, 4]
    assert len(store.get_transcripts("rl-1")) == 5 * 8
    maps = Path(f"/proc/{client.helper_pid()}/maps").read_text()
    assert "duckdb" in maps and "libtorch" not in maps  # the helper imports storage only, never torch


def test_buffered_writes_reach_a_reader_in_another_process_within_seconds(tmp_path):
    db = tmp_path / "studio.duckdb"
    make_run(Store(db), "sl-1", tmp_path)
    writer = run_child(
        """
        for step in range(3):
            client.log_metrics("sl-1", step, {"loss": 1.0})
            client.update_run("sl-1", step=step + 1, total_steps=10)
        print("sent", flush=True)
        time.sleep(60)  # alive and idle: only the helper's timer can flush
    """,
        db,
    )
    try:
        assert writer.stdout.readline().strip() == "sent"
        store = Store(db)
        seconds = wait_for(lambda: store.max_step("sl-1") == 2 and store.get_run("sl-1")["step"] == 3, VISIBLE_WITHIN_S)
        print(f"visible after {seconds:.1f} s")
    finally:
        writer.kill()
        writer.wait()


def test_writes_sent_right_before_a_sigkill_are_all_stored(tmp_path):
    db = tmp_path / "studio.duckdb"
    make_run(Store(db), "rl-1", tmp_path)
    writer = run_child(
        """
        for step in range(20):
            client.log_metrics("rl-1", step, {"loss": 1.0 / (step + 1)})
            client.add_transcripts("rl-1", [dict(step=step, group_idx=0, sample_idx=i, prompt="Q", completion="A")
                                            for i in range(8)])
            client.update_run("rl-1", step=step + 1, total_steps=20)
        print(client.helper_pid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """,
        db,
    )
    helper_pid = int(writer.stdout.readline())
    assert writer.wait(timeout=30) == -signal.SIGKILL
    wait_for(lambda: helper_gone(helper_pid), 10)  # it wrote what it had been sent and exited: no orphan
    store = Store(db)
    assert store.get_metrics("rl-1", ["loss"])["step"].tolist() == list(range(20))
    assert len(store.get_transcripts("rl-1")) == 20 * 8
    assert store.get_run("rl-1")["step"] == 20


def test_bad_input_raises_at_the_call_site_and_writes_nothing(client, tmp_path):
    make_run(client, "rl-1", tmp_path)
    with pytest.raises(TypeError, match="metric 'loss'"):
        client.log_metrics("rl-1", 0, {"loss": "nan-ish"})
    with pytest.raises(TypeError, match="step of run 'rl-1' must be an integer"):
        client.log_metrics("rl-1", 0.5, {"loss": 1.0})
    with pytest.raises(ValueError, match="missing keys \\['completion'\\]"):
        client.add_transcripts("rl-1", [dict(step=0, group_idx=0, sample_idx=0, prompt="Q")])
    with pytest.raises(TypeError, match="step of run 'rl-1' must be an integer"):
        client.update_run("rl-1", step="3")
    with pytest.raises(ValueError, match="already exists"):  # a synchronous call raises Store's own error
        make_run(client, "rl-1", tmp_path)
    assert client.get_metrics("rl-1").empty and client.get_transcripts("rl-1").empty
    assert client.get_run("rl-1")["step"] is None


def test_a_write_that_fails_in_the_helper_fails_the_runs_next_poll_only(client, tmp_path):
    make_run(client, "rl-1", tmp_path)
    client.log_metrics("rl-1", 0, {"loss": 1.0})
    client.update_run("rl-gone", step=1, total_steps=2)  # no such run: fails when the helper applies it
    with pytest.raises(StorageWriteError, match="run 'rl-gone' failed: KeyError"):
        client.run_status("rl-gone")
    assert client.run_status("rl-gone") is None  # reported once
    assert client.get_metrics("rl-1")["value"].tolist() == [1.0]  # the other run's writes in that batch are kept


def test_a_cancel_from_another_process_is_seen_by_the_loop(tmp_path):
    home = tmp_path / "home"
    studio = StoreClient(home / "studio.duckdb")
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
        seconds = wait_for(ctx.cancelled, 5.0, every_s=0.2)
        print(f"cancel seen {seconds:.1f} s after `cookbook cancel` returned")
    finally:
        studio.close()


def test_a_dead_helper_gives_a_clear_error_then_a_fresh_helper(client, tmp_path):
    make_run(client, "rl-1", tmp_path)
    first = client.helper_pid()
    client.log_metrics("rl-1", 0, {"loss": 1.0})  # buffered, not yet flushed when the helper dies
    os.kill(first, signal.SIGKILL)
    time.sleep(0.3)
    with pytest.raises(StorageServiceError, match=f"pid {first}.* ended unexpectedly \\(exit code -9\\)"):
        client.list_runs()
    assert helper_gone(first) and not Path(f"/proc/{first}").exists()  # reaped, not a zombie
    with pytest.raises(StorageWriteError, match="run 'rl-1' sent since its last flush may be lost"):
        client.log_metrics("rl-1", 1, {"loss": 0.5})
    assert [run["run_id"] for run in client.list_runs()] == ["rl-1"]  # a fresh helper
    assert client.helper_pid() != first


def test_close_and_garbage_collection_flush_and_stop_the_helper(tmp_path):
    db = tmp_path / "studio.duckdb"
    client = StoreClient(db)
    make_run(client, "rl-1", tmp_path)
    client.log_metrics("rl-1", 0, {"loss": 1.0})
    pid = client.helper_pid()
    client.close()
    assert not Path(f"/proc/{pid}").exists()
    assert Store(db).max_step("rl-1") == 0

    client.log_metrics("rl-1", 1, {"loss": 0.5})  # starts a new helper
    pid = client.helper_pid()
    del client
    gc.collect()
    assert not Path(f"/proc/{pid}").exists()
    assert Store(db).max_step("rl-1") == 1
