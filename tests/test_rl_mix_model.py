"""RL over a mix of two envs on the real default model (slow): a short run of `env=arithmetic:1,custom:1` (a
built-in env and a custom prompt/answer file) logs env/arithmetic/... and env/<custom>/... at every step, each
env's held-out accuracy, and transcript rows that name their env."""

from __future__ import annotations

import json

import pytest

from cookbook_engine.config import RLConfig
from cookbook_engine.runs import RunManager
from storage import Store

pytestmark = pytest.mark.slow


def test_a_two_env_mix_logs_each_envs_metrics(home, default_model_ready, tmp_path):
    problems = tmp_path / "capitals.jsonl"
    rows = [
        {"prompt": f"What is the capital of {country}? Answer with one word.", "answer": city}
        for country, city in [("France", "Paris"), ("Italy", "Rome"), ("Japan", "Tokyo"), ("Spain", "Madrid")] * 2
    ]
    problems.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = RLConfig(
        env="arithmetic:1,custom:1",
        dataset=str(problems),
        grader="contains",
        group_size=2,
        groups_per_batch=2,
        max_tokens=8,
        max_steps=2,
        num_eval_problems=2,
        eval_every=0,
        save_every=0,
    )
    metrics, trained, transcripts = run_to_completion(config)
    assert len(trained) == 2
    for task in ("arithmetic", "custom"):
        assert trained[f"env/{task}/reward/total"].notna().all(), task  # weights 1:1 over 2 groups: one each step
        assert trained[f"env/{task}/correct"].notna().all(), task
        assert metrics[f"test/env/{task}/correct"].notna().any(), task
    assert sorted({m["task"] for m in transcripts["metrics"]}) == ["arithmetic", "custom"]


def run_to_completion(config: RLConfig):
    """Start the run, wait for it to complete; (every metric by step, the trained steps' rows, the transcripts)."""
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=1800)
    assert run["status"] == "completed", run.get("traceback")
    metrics = Store.default().get_metrics_wide(run_id).sort_values("step")
    return metrics, metrics[metrics["env/all/reward/total"].notna()], Store.default().get_transcripts(run_id)
