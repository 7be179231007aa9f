"""Reliability and security on the real default model: a run whose grader or training data raises mid-run ends
'failed' with its error and traceback while the runs beside it finish and new runs still start; SL, DPO and RL
runs train at once with every metric at every step while the studio's runs page stays quick; a CLI run killed
with SIGKILL shows as interrupted in a studio that was already open; and no secret (Tinker key, Hugging Face
token) is written anywhere a run or an export writes, nor printed by the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from cookbook_engine import config as cfg, export
from cookbook_engine.rl import graders
from cookbook_engine.runs import RunManager, get_manager
from cookbook_engine.sl import loop as supervised
from cookbook_engine.training.common import datum_from_tokens
from storage import Store, stop_owner

REPO = Path(__file__).resolve().parent.parent
COOKBOOK = [sys.executable, "-m", "cookbook_engine.cli"]
WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yuzu"]

pytestmark = pytest.mark.slow


def tiny_chat_file(folder: Path) -> Path:
    path = folder / "tiny.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"Say {w}.", "completion": w}) for w in WORDS))
    return path


def small_sl(data: Path, **overrides) -> cfg.SLConfig:
    settings = dict(
        dataset=str(data),
        max_steps=3,
        batch_size=2,
        max_length=64,
        lora_rank=4,
        test_fraction=0.0,
        eval_every=0,
        save_every=0,
    )
    return cfg.SLConfig(**{**settings, **overrides})


def steps_of(store: Store, run_id: str, name: str) -> list[int]:
    return sorted(store.get_metrics(run_id, [name])["step"].tolist())


# ---------------------------------------------------------------------------------------------- faults


def test_a_run_whose_grader_or_data_raises_fails_alone(home, default_model_ready, tmp_path, monkeypatch):
    """A grader bug (not a wrong answer) and a training row that breaks only when its batch is reached: each run
    ends 'failed' with its error and traceback, its finished steps kept; a healthy run beside them completes and
    the manager starts new runs afterwards."""
    calls = {"n": 0}
    exact = graders.GRADERS["exact"]

    def buggy_grader(response: str, answer: str):
        calls["n"] += 1
        if calls["n"] > 2:  # step 0 (one group of two) grades fine; step 1 hits the bug
            raise RuntimeError("grader bug: lookup table missing")
        return exact(response, answer)

    monkeypatch.setitem(graders.GRADERS, "exact", buggy_grader)
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join(json.dumps({"prompt": f"Say {w}.", "answer": w}) for w in WORDS))
    rl_config = cfg.RLConfig(
        env="custom",
        dataset=str(problems),
        grader="exact",
        max_steps=3,
        groups_per_batch=1,
        group_size=2,
        max_tokens=8,
        num_eval_problems=0,
        eval_every=0,
        save_every=0,
        lora_rank=4,
        test_fraction=0.0,
    )

    data = tiny_chat_file(tmp_path)
    broken_config = small_sl(data, name="broken-row")
    prepared = supervised.prepare(broken_config)
    batches_per_epoch, _ = supervised.plan_steps(broken_config, len(prepared.train))
    second_batch = supervised.batch_at(prepared.train, broken_config, 1, batches_per_epoch)
    bad_row = datum_from_tokens([1, 10_000_000, 2], [0.0, 1.0, 1.0])  # a token id outside the vocabulary
    prepared.train = [bad_row if any(d is b for b in second_batch) else d for d in prepared.train]

    manager = RunManager()
    rl_id = manager.start(rl_config)
    broken_id = manager.start(broken_config, prepared=prepared)
    healthy_id = manager.start(small_sl(data, name="healthy"))
    runs = {run_id: manager.wait(run_id, timeout=600) for run_id in (rl_id, broken_id, healthy_id)}

    rl, broken, healthy = runs[rl_id], runs[broken_id], runs[healthy_id]
    assert rl["status"] == "failed" and "RuntimeError: grader bug: lookup table missing" in rl["error"]
    assert "buggy_grader" in rl["traceback"]
    assert steps_of(manager.store, rl_id, "env/all/reward/total") == [0]  # the finished step is kept
    assert broken["status"] == "failed" and broken["error"] and "Traceback" in broken["traceback"]
    assert steps_of(manager.store, broken_id, "train_mean_nll") == [0]
    assert "run failed" in (Path(broken["log_dir"]) / "log.txt").read_text()
    assert healthy["status"] == "completed", healthy.get("traceback")
    assert steps_of(manager.store, healthy_id, "train_mean_nll") == [0, 1, 2]

    after_id = manager.start(small_sl(data, max_steps=1, name="after"))
    assert manager.wait(after_id, timeout=300)["status"] == "completed"

    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=120)
    at.run()
    at.query_params["run"] = rl_id
    at.switch_page("../pages/run.py").run()
    shown = "\n".join(str(e.value) for e in at.error).replace("\\", "")
    assert "grader bug: lookup table missing" in shown  # the studio shows the error


@pytest.mark.parametrize(
    "mode",
    [{"stream_minibatch": True, "num_minibatches": 2}, {"max_steps_off_policy": 1}],
    ids=["streaming", "off-policy"],
)
def test_a_grader_bug_fails_a_pipelined_rl_run_instead_of_hanging_it(
    home, default_model_ready, tmp_path, monkeypatch, mode
):
    """In the modes where sampling runs in background tasks, a grader that raises still ends the run 'failed' with
    its error, promptly, and leaves no sampling running behind it."""
    exact = graders.GRADERS["exact"]
    calls = {"n": 0}

    def buggy_grader(response: str, answer: str):
        calls["n"] += 1
        if calls["n"] > 4:  # the first step's groups grade fine
            raise RuntimeError("grader bug in a background task")
        return exact(response, answer)

    monkeypatch.setitem(graders.GRADERS, "exact", buggy_grader)
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join(json.dumps({"prompt": f"Say {w}.", "answer": w}) for w in WORDS))
    config = cfg.RLConfig(
        env="custom",
        dataset=str(problems),
        grader="exact",
        max_steps=4,
        groups_per_batch=2,
        group_size=2,
        max_tokens=8,
        num_eval_problems=0,
        eval_every=0,
        save_every=0,
        lora_rank=4,
        test_fraction=0.0,
        pipelining=cfg.PipeliningConfig(**mode),
    )
    manager = RunManager()
    run = manager.wait(manager.start(config), timeout=300)
    assert run["status"] == "failed" and "grader bug in a background task" in run["error"], run
    graded = calls["n"]
    time.sleep(3)
    assert calls["n"] == graded  # nothing is still sampling and grading for the failed run


# ---------------------------------------------------------------------------------------------- concurrency


EXPECTED_METRICS = {
    "sl": ["train_mean_nll", "learning_rate", "num_tokens"],
    "dpo": ["dpo_loss", "accuracy", "margin", "chosen_reward", "rejected_reward"],
    "rl": ["env/all/reward/total", "env/all/correct", "env/all/format"],
}


def test_sl_dpo_and_rl_at_once_all_finish_with_every_metric_and_the_studio_stays_quick(
    home, default_model_ready, tmp_path
):
    manager = get_manager()
    steps = {"sl": 3, "dpo": 2, "rl": 2}
    configs = [
        small_sl(tiny_chat_file(tmp_path), max_steps=steps["sl"]),
        cfg.DPOConfig(
            max_steps=steps["dpo"],
            batch_size=2,
            max_length=128,
            lora_rank=4,
            test_fraction=0.0,
            eval_every=0,
            save_every=0,
        ),
        cfg.RLConfig(
            max_steps=steps["rl"],
            groups_per_batch=2,
            group_size=2,
            max_tokens=12,
            num_eval_problems=0,
            eval_every=0,
            save_every=0,
            lora_rank=4,
        ),
    ]
    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=60)
    at.run()
    at.switch_page("../pages/runs.py").run()  # imports and caches warmed before the runs start

    run_ids = {config.kind: manager.start(config) for config in configs}
    render_seconds = []
    while any(manager.is_alive(run_id) for run_id in run_ids.values()):
        started = time.perf_counter()
        at.run()
        render_seconds.append(time.perf_counter() - started)
        assert not at.exception, [e.value for e in at.exception]
        time.sleep(1.0)
    assert render_seconds and max(render_seconds) < 5.0, render_seconds  # the page renders while three runs train

    runs = {kind: manager.store.get_run(run_id) for kind, run_id in run_ids.items()}
    for kind, run in runs.items():
        assert run["status"] == "completed", (kind, run.get("traceback"))
        for name in EXPECTED_METRICS[kind]:
            assert steps_of(manager.store, run["run_id"], name) == list(range(steps[kind])), (kind, name)
        metrics = manager.store.get_metrics(run["run_id"])
        assert not metrics.duplicated(["step", "name"]).any()
    latest_start = max(run["started_at"] for run in runs.values())
    earliest_finish = min(run["finished_at"] for run in runs.values())
    assert latest_start < earliest_finish, "the three runs never trained at the same time"


# ---------------------------------------------------------------------------------------------- a killed CLI run


def test_a_killed_cli_run_shows_interrupted_in_an_already_open_studio(home, default_model_ready, tmp_path):
    from app import state

    studio_store = state.store()  # the studio is open before the CLI run starts
    process = subprocess.Popen(
        [
            *COOKBOOK,
            "sl",
            f"dataset={tiny_chat_file(tmp_path)}",
            "max_steps=200",
            "batch_size=2",
            "eval_every=0",
            "save_every=0",
            "lora_rank=4",
            "test_fraction=0",
        ],
        env={**os.environ, "COOKBOOK_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        running = None
        while time.monotonic() < deadline and running is None:
            running = next((r for r in state.store().list_runs() if r["status"] == "running" and r["step"]), None)
            time.sleep(0.2)
        assert running is not None, "the CLI run never started training"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    killed_at = time.monotonic()
    while state.store().get_run(running["run_id"])["status"] == "running" and time.monotonic() - killed_at < 10:
        time.sleep(0.2)
    run = studio_store.get_run(running["run_id"])
    assert run["status"] == "interrupted" and "ended without finishing" in run["error"]
    assert time.monotonic() - killed_at < 10


# ---------------------------------------------------------------------------------------------- secrets


TINKER_KEY = "tml-reliability-secret-7f3a9c2e"
HF_TOKEN = "hf_reliabilitySecretToken9d8e7f"


def texts_of(path: Path) -> list[bytes]:
    """A file's bytes, and for a zip also each member's uncompressed bytes (compression would hide a secret)."""
    data = path.read_bytes()
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return [data] + [archive.read(name) for name in archive.namelist()]
    return [data]


def test_secrets_are_never_written_by_a_run_or_an_export_nor_printed(home, default_model_ready, tmp_path, monkeypatch):
    secrets_env = {"TINKER_API_KEY": TINKER_KEY, "HF_TOKEN": HF_TOKEN, "HUGGING_FACE_HUB_TOKEN": HF_TOKEN}
    result = subprocess.run(
        [
            *COOKBOOK,
            "sl",
            f"dataset={tiny_chat_file(tmp_path)}",
            "max_steps=2",
            "batch_size=2",
            "lora_rank=4",
            "test_fraction=0.25",
            "eval_every=1",
            "save_every=1",
        ],
        env={**os.environ, "COOKBOOK_HOME": str(home), **secrets_env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    for name, value in secrets_env.items():
        monkeypatch.setenv(name, value)
    store = Store(home / "studio.duckdb")
    [run] = store.list_runs()
    final = next(c for c in store.list_checkpoints(run["run_id"]) if (c.get("loop_state") or {}).get("final"))
    adapter_zip = export.adapter_zip(final["sampler_path"])
    merged = export.merged_model(final["sampler_path"])
    assert adapter_zip.parent == merged.parent == home / "exports"

    places: dict[str, list[bytes]] = {"cli stdout": [result.stdout.encode()], "cli stderr": [result.stderr.encode()]}
    for path in sorted(home.rglob("*")):
        if path.is_file() and path.name != "studio.duckdb":  # the database is searched table by table below
            places[str(path.relative_to(home))] = texts_of(path)
    stop_owner(home / "studio.duckdb")  # the owner holds the file: let this test open it itself
    with duckdb.connect(str(home / "studio.duckdb"), read_only=True) as connection:
        tables = [row[0] for row in connection.execute("SHOW TABLES").fetchall()]
        for table in tables:
            rows = connection.execute(f'SELECT * FROM "{table}"').fetchall()
            places[f"table {table}"] = [json.dumps(rows, default=str).encode()]
    assert run["run_id"].encode() in places["table runs"][0] and "metrics.jsonl" in " ".join(places)
    assert any(name.startswith("exports/") and name.endswith(".safetensors") for name in places)
    leaks = [
        (where, secret)
        for where, blobs in places.items()
        for secret in (TINKER_KEY, HF_TOKEN)
        if any(secret.encode() in blob for blob in blobs)
    ]
    assert leaks == []
    assert len(places) >= 20 and len(tables) >= 5
    print(f"searched {len(places)} places ({len(tables)} tables) for 2 secrets")
