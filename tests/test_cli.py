"""The `cookbook` command line: --dry-run validates and prints the resolved config, bad input exits 2 with one
line naming the problem and writes nothing, and a CLI run is visible live from another process reading the
database (as the studio does) while it trains."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage import Store

COOKBOOK = [sys.executable, "-m", "cookbook_engine.cli"]


def cookbook(*args, home: Path, timeout=300):
    env = {**os.environ, "COOKBOOK_HOME": str(home), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    return subprocess.run([*COOKBOOK, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_dry_run_prints_resolved_config_and_trains_nothing(home, default_model_ready):
    result = cookbook("sl", "max_steps=3", "batch_size=4", "learning_rate=2e-4", "--dry-run", home=home)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout.split("\n# ")[0])
    assert config["max_steps"] == 3 and config["learning_rate"] == 2e-4 and config["kind"] == "sl"
    assert "# cookbook sl learning_rate=0.0002 batch_size=4 max_steps=3" in result.stdout
    assert "training and" in result.stdout  # the dataset summary
    assert not (home / "studio.duckdb").exists() or Store(home / "studio.duckdb").list_runs() == []
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["learning_rate=-1"], "learning_rate=-1.0: must be positive"),
        (["batch_size=zero"], "batch_size='zero': expected int"),
        (["max_stepz=3"], "max_stepz: unknown setting"),
        (["dataset=/no/such/file.jsonl"], "/no/such/file.jsonl"),
        (["model=/no/such/folder"], "model /no/such/folder"),
        (["renderer=klingon"], "renderer 'klingon' is unknown"),
        (["lr_schedule=sawtooth"], "lr_schedule=sawtooth"),
        (["max_steps"], "settings are written key=value"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(home, default_model_ready, args, message):
    result = cookbook("sl", *args, home=home)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cookbook: error:") and message in lines[0], result.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_unknown_command_and_help(home):
    assert cookbook("frobnicate", home=home).returncode == 2
    assert "cookbook sl" in cookbook("--help", home=home).stdout


@pytest.mark.slow
def test_a_cli_run_shows_up_live_in_another_process(home, default_model_ready, tmp_path):
    data = tmp_path / "tiny.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"prompt": f"Say {w}.", "completion": w})
            for w in ["apple", "pear", "plum", "fig", "kiwi", "lime"]
        )
    )
    env = {**os.environ, "COOKBOOK_HOME": str(home)}
    process = subprocess.Popen(
        [*COOKBOOK, "sl", f"dataset={data}", "max_steps=4", "batch_size=2", "eval_every=0", "save_every=2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = Store(home / "studio.duckdb")
    seen_steps, statuses = set(), set()
    deadline = time.time() + 300
    while process.poll() is None and time.time() < deadline:
        if (home / "studio.duckdb").exists():
            for run in store.list_runs():  # reading while the CLI writes: neither side may fail on the lock
                statuses.add(run["status"])
                seen_steps.update(store.get_metrics(run["run_id"])["step"].tolist())
        time.sleep(0.1)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "running" in statuses and seen_steps, "the run was not visible while it trained"
    assert "step 4/4 (100%)" in err and "\r" not in err  # stderr is no terminal: plain progress lines, no bar
    assert "train_unembed" not in err  # the studio's own loops ask the local backend only for what it trains
    [run] = store.list_runs()
    assert run["status"] == "completed" and run["step"] == 4
    listing = json.loads(cookbook("runs", "--json", home=home).stdout)
    assert listing[0]["run_id"] == run["run_id"] and listing[0]["key_metric"] == "train_mean_nll"
