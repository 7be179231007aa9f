"""Faults: a run whose process is killed (SIGKILL) mid-run shows as interrupted, keeps its metrics up to the last
finished step and resumes from its last checkpoint with no duplicated or missing steps; an unwritable home folder
gives one clear message."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cookbook_engine.runs import RunManager
from storage import Store

COOKBOOK = [sys.executable, "-m", "cookbook_engine.cli"]


@pytest.mark.slow
def test_sigkill_mid_run_then_resume(home, default_model_ready, tmp_path):
    data = tmp_path / "tiny.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"prompt": f"Spell {w}.", "completion": "-".join(w)})
            for w in ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yuzu"]
        )
    )
    env = {**os.environ, "COOKBOOK_HOME": str(home)}
    process = subprocess.Popen(
        [
            *COOKBOOK,
            "sl",
            f"dataset={data}",
            "max_steps=10",
            "batch_size=2",
            "eval_every=0",
            "save_every=2",
            "test_fraction=0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    store = Store(home / "studio.duckdb")
    deadline = time.time() + 300
    run = None
    while time.time() < deadline:
        runs = store.list_runs() if (home / "studio.duckdb").exists() else []
        if runs and store.list_checkpoints(runs[0]["run_id"]) and (store.max_step(runs[0]["run_id"]) or 0) >= 4:
            run = runs[0]
            break
        time.sleep(0.05)
    assert run is not None, "the run never reached its second checkpoint"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    run_id = run["run_id"]
    assert store.get_run(run_id)["status"] == "running"  # nobody has looked yet

    RunManager(store)  # a studio or CLI starting up notices the dead owner
    killed = store.get_run(run_id)
    assert killed["status"] == "interrupted" and "interrupted" in killed["error"]
    logged = store.get_metrics(run_id, ["train_mean_nll"])["step"].tolist()
    assert logged == list(range(len(logged))) and len(logged) >= 5  # intact up to the last finished step
    checkpoint = store.last_checkpoint(run_id)["step"]

    result = subprocess.run([*COOKBOOK, "resume", run_id], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert store.get_run(run_id)["status"] == "completed"
    steps = store.get_metrics(run_id, ["train_mean_nll"])["step"].tolist()
    assert steps == list(range(10))
    lines = [json.loads(line)["step"] for line in (home / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
    assert lines == list(range(10))
    assert checkpoint in [c["step"] for c in store.list_checkpoints(run_id)]


def in_own_mount(home, size: str, options: str, command: list[str]):
    """Run the CLI with `home` as a fresh tmpfs of the given size/options (a private mount namespace: needs root
    or user namespaces, which this project's machines have)."""
    script = f"mount -t tmpfs -o size={size}{options} tmpfs '{home}' && exec \"$@\""
    env = {**os.environ, "COOKBOOK_HOME": str(home)}
    return subprocess.run(
        ["unshare", "-m", "--map-root-user" if os.geteuid() else "-m", "sh", "-c", script, "sh", *COOKBOOK, *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_read_only_home_gives_one_clear_message_and_writes_nothing(tmp_path, default_model_ready):
    home = tmp_path / "ro"
    home.mkdir()
    for command in (["runs"], ["sl", "max_steps=1"]):
        result = in_own_mount(home, "1m", ",ro", command)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0] == (
            f"cookbook: error: studio home {home}: not writable; set COOKBOOK_HOME to a writable folder"
        )


def test_full_home_gives_one_clear_message(tmp_path, default_model_ready):
    home = tmp_path / "full"
    home.mkdir()
    result = in_own_mount(home, "8k", "", ["sl", "max_steps=1", "batch_size=2"])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"studio home {home}: " in lines[0] and "No space left on device" in lines[0]


def test_home_that_is_a_file_gives_one_clear_message(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for command in (["runs"], ["sl", "max_steps=1", "--dry-run"]):
        result = subprocess.run(
            [*COOKBOOK, *command],
            env={**os.environ, "COOKBOOK_HOME": str(blocker / "home")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "studio home" in lines[0] and "cannot create it" in lines[0]
