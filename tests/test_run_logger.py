"""The run logger: the run folder's files in tinker-cookbook's shapes, agreeing with the store, and resume
truncation removing later steps from both."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cookbook_engine import paths
from cookbook_engine.training.run_logger import RunLogger
from storage import Store


@pytest.fixture
def logger(tmp_path, monkeypatch) -> RunLogger:
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    store = Store.default()
    log_dir = paths.run_dir("rl-1")
    store.create_run(
        "rl-1", name="rl", kind="rl", backend="local", base_model="SmolLM2-135M-Instruct", config={}, log_dir=log_dir
    )
    return RunLogger(store, "rl-1", log_dir)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_files_are_written_in_the_cookbooks_shapes(logger):
    config = {"model_name": "SmolLM2-135M-Instruct", "learning_rate": 1e-3, "log_path": logger.log_dir}
    logger.write_config(config)
    assert json.loads((logger.log_dir / "config.json").read_text()) == {**config, "log_path": str(logger.log_dir)}
    assert '\n  "model_name"' in (logger.log_dir / "config.json").read_text()  # indent 2

    logger.log_metrics(
        0, {"env/all/reward/total": np.float32(0.25), "optim/entropy": torch.tensor(1.5), "progress": np.int64(0)}
    )
    logger.log_metrics(np.int64(1), {"env/all/reward/total": 0.5})
    lines = read_jsonl(logger.log_dir / "metrics.jsonl")
    assert lines == [
        {"step": 0, "env/all/reward/total": 0.25, "optim/entropy": 1.5, "progress": 0.0},
        {"step": 1, "env/all/reward/total": 0.5},
    ]
    assert logger.store.get_metrics_wide("rl-1")["env/all/reward/total"].tolist() == [0.25, 0.5]

    logger.log_checkpoint(
        step=1,
        name="000001",
        kind="both",
        state_path="/ck/1/state",
        sampler_path="/ck/1/sampler",
        loop_state={"epoch": 0},
    )
    logger.log_checkpoint(step=2, name="000002", kind="sampler", sampler_path="/ck/2/sampler")
    assert read_jsonl(logger.log_dir / "checkpoints.jsonl") == [
        {"name": "000001", "batch": 1, "state_path": "/ck/1/state", "sampler_path": "/ck/1/sampler", "epoch": 0},
        {"name": "000002", "batch": 2, "sampler_path": "/ck/2/sampler"},
    ]
    assert logger.store.last_checkpoint("rl-1")["loop_state"] == {"epoch": 0}

    logger.log_transcripts([dict(step=1, group_idx=0, sample_idx=0, prompt="Q", completion="A", reward=1.0)])
    assert logger.store.get_transcripts("rl-1").completion.tolist() == ["A"]


def test_a_bad_metric_is_refused_before_anything_is_written(logger):
    with pytest.raises(TypeError, match="metric 'loss'"):
        logger.log_metrics(0, {"loss": "nan-ish"})
    with pytest.raises(TypeError, match="step .* must be an integer"):
        logger.log_metrics(0.5, {"loss": 1.0})
    assert not (logger.log_dir / "metrics.jsonl").exists()
    assert logger.store.get_metrics("rl-1").empty


def test_truncate_after_removes_later_steps_from_the_file_and_the_store(logger):
    for step in range(6):
        logger.log_metrics(step, {"loss": 1.0 / (step + 1)})
        logger.log_transcripts([dict(step=step, group_idx=0, sample_idx=0, prompt="Q", completion=f"A{step}")])
    with (logger.log_dir / "metrics.jsonl").open("a") as file:
        file.write('{"step": 6, "lo')  # a crash tore the last line

    logger.truncate_after(2)
    assert [line["step"] for line in read_jsonl(logger.log_dir / "metrics.jsonl")] == [0, 1, 2]
    assert logger.store.max_step("rl-1") == 2
    assert logger.store.transcript_steps("rl-1") == [0, 1, 2]

    logger.log_metrics(3, {"loss": 0.3})  # the resumed run logs step 3 again: once, in both places
    assert [line["step"] for line in read_jsonl(logger.log_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    assert logger.store.get_metrics("rl-1").step.tolist() == [0, 1, 2, 3]
    assert logger.store.get_metrics("rl-1").value.iloc[-1] == 0.3
