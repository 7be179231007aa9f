"""The DuckDB store: round trips for every table, resume semantics, orphan detection, and two processes writing and
reading at once through the file's one owner (its life cycle: tests/test_storage_owner.py)."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from storage import Store
from storage.schema import MIGRATIONS


@pytest.fixture
def store(tmp_path, monkeypatch) -> Store:
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    return Store.default()


def make_run(store: Store, run_id: str, **overrides) -> None:
    fields = dict(
        name=f"name of {run_id}",
        kind="rl",
        backend="local",
        base_model="SmolLM2-135M-Instruct",
        config={"learning_rate": 1e-3, "group_size": 4},
        log_dir=f"/runs/{run_id}",
    )
    fields.update(overrides)
    store.create_run(run_id, **fields)


def test_default_store_lives_in_the_home_folder_with_the_current_schema(store, tmp_path):
    assert store.path == (tmp_path / "home" / "studio.duckdb").resolve()
    assert store.schema_version() == len(MIGRATIONS)
    assert store.path.exists()


def test_run_round_trip_and_lifecycle(store):
    make_run(store, "run-a", total_steps=10)
    time.sleep(0.01)
    make_run(store, "run-b", kind="sl", backend="tinker", parent_run_id="run-a", parent_checkpoint="tinker://x")

    run = store.get_run("run-a")
    assert run["config"] == {"learning_rate": 1e-3, "group_size": 4}
    assert (run["status"], run["kind"], run["total_steps"], run["log_dir"]) == ("queued", "rl", 10, "/runs/run-a")
    assert run["started_at"] is None and run["owner_pid"] is None
    assert [r["run_id"] for r in store.list_runs()] == ["run-b", "run-a"]
    assert store.get_run("run-b")["parent_checkpoint"] == "tinker://x"
    assert store.get_run("missing") is None

    store.claim_run("run-a")
    claimed = store.get_run("run-a")
    assert claimed["status"] == "running"
    assert (claimed["owner_pid"], claimed["owner_host"]) == (os.getpid(), socket.gethostname())
    assert claimed["started_at"] is not None

    store.update_run("run-a", step=3, config={"learning_rate": 2e-3})
    heartbeat = store.get_run("run-a")
    assert heartbeat["step"] == 3 and heartbeat["config"] == {"learning_rate": 2e-3}
    assert heartbeat["updated_at"] >= claimed["updated_at"]

    store.update_run("run-a", status="failed", error="boom", traceback="Traceback ...")
    failed = store.get_run("run-a")
    assert (failed["status"], failed["error"]) == ("failed", "boom")
    assert failed["finished_at"] is not None

    aware = datetime(2030, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    store.update_run("run-b", status="completed", finished_at=aware)
    assert store.get_run("run-b")["finished_at"] == datetime(2030, 1, 1, 10, 0)  # stored as UTC

    store.claim_run("run-a")  # resuming keeps the first start time and clears the old failure
    resumed = store.get_run("run-a")
    assert resumed["started_at"] == claimed["started_at"]
    assert (resumed["status"], resumed["error"], resumed["finished_at"]) == ("running", None, None)


def test_bad_run_inputs_are_refused_with_a_clear_message(store):
    with pytest.raises(ValueError, match="kind of run 'r'.*'ppo'"):
        make_run(store, "r", kind="ppo")
    make_run(store, "r")
    with pytest.raises(ValueError, match="already exists"):
        make_run(store, "r")
    with pytest.raises(ValueError, match="unknown or read-only fields \\['colour'\\]"):
        store.update_run("r", colour="red")
    with pytest.raises(ValueError, match="status of run 'r'.*'paused'"):
        store.update_run("r", status="paused")
    with pytest.raises(KeyError, match="no run 'ghost'"):
        store.update_run("ghost", step=1)
    with pytest.raises(TypeError, match="metric 'loss'.*str"):
        store.log_metrics("r", 0, {"loss": "low"})


def test_relogging_a_step_replaces_it_and_metrics_read_back_long_and_wide(store):
    make_run(store, "r")
    store.log_metrics("r", 0, {"loss": np.float32(2.0), "reward": 0.1})
    store.log_metrics("r", 1, {"loss": 1.5, "reward": float("nan")})
    store.log_metrics("r", 1, {"loss": 1.25})  # the step is logged again after a resume
    store.log_metrics("r", 2, {"loss": 1.0, "kl": 0.01})

    long = store.get_metrics("r")
    assert list(long.columns) == ["step", "name", "value"]
    assert long[["step", "name"]].values.tolist() == [
        [0, "loss"],
        [0, "reward"],
        [1, "loss"],
        [1, "reward"],
        [2, "kl"],
        [2, "loss"],
    ]
    assert long.loc[(long.step == 1) & (long.name == "loss"), "value"].item() == 1.25
    assert math.isnan(long.loc[(long.step == 1) & (long.name == "reward"), "value"].item())  # NaN kept as NULL
    assert store.get_metrics("r", names=["kl"]).value.tolist() == [0.01]

    wide = store.get_metrics_wide("r")
    assert list(wide.columns) == ["step", "kl", "loss", "reward"]
    assert wide.step.tolist() == [0, 1, 2]
    assert wide.loss.tolist() == [2.0, 1.25, 1.0]

    assert store.metric_names("r") == ["kl", "loss", "reward"]
    assert store.max_step("r") == 2 and store.max_step("other") is None
    make_run(store, "s")
    store.log_metrics("s", 5, {"reward": 0.7})
    assert store.last_metrics(["r", "s", "nobody"], "reward") == {"r": 0.1, "s": 0.7}  # step 1 reward is NULL

    store.delete_metrics_after("r", 0)
    assert store.get_metrics("r").step.unique().tolist() == [0]
    assert list(store.get_metrics_wide("nobody").columns) == ["step"]


def test_checkpoints_round_trip(store):
    make_run(store, "r")
    store.add_checkpoint(
        "r",
        step=5,
        name="000005",
        kind="both",
        state_path="/ck/5/state",
        sampler_path="/ck/5/sampler",
        loop_state={"batch": 5, "epoch": 0},
    )
    time.sleep(0.01)
    store.add_checkpoint("r", step=8, name="000008", kind="sampler", sampler_path="/ck/8/sampler")
    time.sleep(0.01)
    store.add_checkpoint(
        "r",
        step=5,
        name="000005",
        kind="both",
        state_path="/ck/5/state-again",
        sampler_path="/ck/5/sampler",
        loop_state={"batch": 5, "epoch": 0},
    )

    checkpoints = store.list_checkpoints("r")
    assert [c["name"] for c in checkpoints] == ["000005", "000008"]  # newest first, re-saved name replaced
    assert checkpoints[0]["loop_state"] == {"batch": 5, "epoch": 0}
    assert store.last_checkpoint("r")["state_path"] == "/ck/5/state-again"
    assert store.last_checkpoint("r", kind_with_state=False)["name"] == "000008"
    assert store.last_checkpoint("other") is None
    with pytest.raises(ValueError, match="kind 'state' but no state_path"):
        store.add_checkpoint("r", step=9, name="000009", kind="state")

    make_run(store, "s")
    store.add_checkpoint("s", step=1, name="000001", kind="state", state_path="/s/1")
    assert [(c["run_id"], c["name"]) for c in store.list_checkpoints()] == [
        ("s", "000001"),
        ("r", "000005"),
        ("r", "000008"),
    ]


def test_transcripts_round_trip_with_filters(store):
    make_run(store, "r")
    rows = [
        dict(
            step=step,
            group_idx=group,
            sample_idx=sample,
            prompt=f"Q{group}",
            completion=f"A{sample}",
            reward=float(sample),
            advantage=sample - 1.5,
            stop_reason="stop",
            metrics={"tests_passed": np.int64(sample), "sandbox_error": None},
        )
        for step in (0, 2)
        for group in range(2)
        for sample in range(4)
    ]
    store.add_transcripts("r", rows)
    store.add_transcripts("r", [dict(step=3, group_idx=0, sample_idx=0, prompt="Q", completion="A")])

    everything = store.get_transcripts("r")
    assert len(everything) == 17
    first = everything.iloc[0]
    assert (first.step, first.group_idx, first.sample_idx, first.prompt, first.completion) == (0, 0, 0, "Q0", "A0")
    assert first.metrics == {"tests_passed": 0, "sandbox_error": None}
    assert (first.advantage, first.stop_reason) == (-1.5, "stop")
    minimal = everything.iloc[-1]
    assert math.isnan(minimal.reward) and minimal.metrics == {}

    assert len(store.get_transcripts("r", step=2)) == 8
    good = store.get_transcripts("r", min_reward=2, max_reward=3)
    assert sorted(set(good.reward)) == [2.0, 3.0] and len(good) == 8
    assert len(store.get_transcripts("r", limit=3)) == 3
    assert store.transcript_steps("r") == [0, 2, 3]
    with pytest.raises(ValueError, match="transcript row 0 .*missing keys \\['completion'\\]"):
        store.add_transcripts("r", [dict(step=0, group_idx=0, sample_idx=0, prompt="Q")])


def test_datasets_register_is_an_upsert(store):
    store.register_dataset("facts", kind="chat", source="builtin", path="/data/facts.jsonl", num_rows=40)
    store.register_dataset(
        "prefs",
        kind="preference",
        source="upload",
        path="/u/p.jsonl",
        num_rows=10,
        meta={"columns": ["prompt", "chosen", "rejected"]},
    )
    store.register_dataset("facts", kind="chat", source="builtin", path="/data/facts.jsonl", num_rows=42)
    datasets = store.list_datasets()
    assert [(d["name"], d["num_rows"]) for d in datasets] == [("facts", 42), ("prefs", 10)]
    assert datasets[1]["meta"] == {"columns": ["prompt", "chosen", "rejected"]}
    with pytest.raises(ValueError, match="source of dataset 'x'"):
        store.register_dataset("x", kind="chat", source="ftp", path="/x", num_rows=1)
    store.delete_dataset("facts")
    assert [d["name"] for d in store.list_datasets()] == ["prefs"]


def test_delete_run_cleans_every_table(store):
    for run_id in ("gone", "kept"):
        make_run(store, run_id)
        store.log_metrics(run_id, 0, {"loss": 1.0})
        store.add_checkpoint(run_id, step=0, name="000000", kind="state", state_path="/s")
        store.add_transcripts(run_id, [dict(step=0, group_idx=0, sample_idx=0, prompt="Q", completion="A")])
    store.delete_run("gone")
    assert store.get_run("gone") is None
    assert store.get_metrics("gone").empty and store.get_transcripts("gone").empty
    assert store.list_checkpoints("gone") == []
    assert store.get_run("kept") is not None and len(store.get_metrics("kept")) == 1
    assert len(store.list_checkpoints("kept")) == 1 and len(store.get_transcripts("kept")) == 1


def test_mark_orphans_interrupted_only_touches_runs_whose_process_died_on_this_host(store):
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead_pid = finished.pid
    host = socket.gethostname()
    for run_id in ("orphan", "cancelling-orphan", "queued-orphan", "alive", "elsewhere", "unclaimed", "done"):
        make_run(store, run_id)
    store.update_run("orphan", status="running", owner_pid=dead_pid, owner_host=host)
    store.update_run("cancelling-orphan", status="cancelling", owner_pid=dead_pid, owner_host=host)
    store.update_run("queued-orphan", owner_pid=dead_pid, owner_host=host)
    store.claim_run("alive")
    store.update_run("elsewhere", status="running", owner_pid=dead_pid, owner_host="another-machine")
    store.update_run("done", status="completed", owner_pid=dead_pid, owner_host=host)

    assert store.mark_orphans_interrupted() == ["cancelling-orphan", "orphan", "queued-orphan"]
    orphan = store.get_run("orphan")
    assert orphan["status"] == "interrupted" and str(dead_pid) in orphan["error"]
    statuses = {run_id: store.get_run(run_id)["status"] for run_id in ("alive", "elsewhere", "unclaimed", "done")}
    assert statuses == {"alive": "running", "elsewhere": "running", "unclaimed": "queued", "done": "completed"}
    assert store.mark_orphans_interrupted() == []


CLI_RUN = """
import sys
from storage import Store
store = Store(sys.argv[1])
for step in range(200):
    store.log_metrics("cli-run", step, {"loss": 1.0 / (step + 1), "reward": step / 200})
    if step % 20 == 0:
        store.update_run("cli-run", step=step)
store.update_run("cli-run", status="completed", step=199)
"""


def test_a_cli_process_and_studio_threads_share_the_file_without_lock_errors(store):
    make_run(store, "cli-run", status="running")
    make_run(store, "studio-run", status="running")
    cli = subprocess.Popen(
        [sys.executable, "-c", CLI_RUN, str(store.path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    errors: list[BaseException] = []
    rows_seen_while_running: list[int] = []
    studio_steps = []

    def studio_reader():
        try:
            while cli.poll() is None:
                rows_seen_while_running.append(len(store.get_metrics("cli-run")))
                assert {run["run_id"] for run in store.list_runs()} == {"cli-run", "studio-run"}
        except BaseException as exc:
            errors.append(exc)

    def studio_writer():
        try:
            step = 0
            while cli.poll() is None:
                store.log_metrics("studio-run", step, {"loss": 0.5, "accuracy": 0.9})
                studio_steps.append(step)
                step += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=studio_reader), threading.Thread(target=studio_writer)]
    for thread in threads:
        thread.start()
    _, cli_stderr = cli.communicate(timeout=120)
    for thread in threads:
        thread.join(timeout=60)

    assert cli.returncode == 0, cli_stderr
    assert errors == []
    cli_metrics = store.get_metrics("cli-run")
    assert len(cli_metrics) == 400 and cli_metrics.step.unique().tolist() == list(range(200))
    assert store.get_run("cli-run")["status"] == "completed"
    assert len(store.get_metrics("studio-run")) == 2 * len(studio_steps) > 0
    assert any(0 < rows < 400 for rows in rows_seen_while_running), "the studio never saw the CLI run live"
    print(
        f"\nstudio read {len(rows_seen_while_running)} times and wrote {len(studio_steps)} steps "
        "while the CLI process wrote 200"
    )


def test_bulk_metrics_of_50_runs_insert_and_read_back_fast(store):
    steps_T = np.repeat(np.arange(1000), 20)
    names_T = np.tile([f"metric/{index:02d}" for index in range(20)], 1000)
    started = time.perf_counter()
    for run_index in range(50):
        make_run(store, f"run-{run_index:02d}")
        values_T = np.random.default_rng(run_index).random(20_000)
        frame = pd.DataFrame({"step": steps_T, "name": names_T, "value": values_T})
        store.log_metrics_bulk(f"run-{run_index:02d}", frame)
    insert_s = time.perf_counter() - started

    started = time.perf_counter()
    wide = store.get_metrics_wide("run-17")
    read_s = time.perf_counter() - started
    print(f"\n1,000,000 metric points: insert {insert_s:.2f} s (50 runs), wide read of one run {read_s * 1000:.0f} ms")
    assert wide.shape == (1000, 21)
    expected = np.random.default_rng(17).random(20_000).reshape(1000, 20)
    assert np.allclose(wide.drop(columns="step").to_numpy(), expected)
    assert read_s < 5
