"""tinker-cookbook 0.6.1's own training entry points, run UNMODIFIED against the local backend for a couple of steps
on the default model, in process (`tinker.ServiceClient` replaced by LocalServiceClient) and over HTTP through
`cookbook serve`: supervised.train.main (its file dataset builder with a held-out split, so its NLL evaluator runs,
and save_every so a checkpoint is saved), preference.train_dpo.main (a small local preference file),
rl.train.main (synchronous, async and streaming-minibatch) and distillation.train_on_policy.main (teacher = the base
model). Each run finishes, logs its metrics to log_path/metrics.jsonl with finite losses, and records a final
checkpoint. Hub downloads, tokenizer and renderer lookups are replaced by tests/test_tinker_recipes.py's fixture.
Not for the recipes' scripts (test_tinker_recipes.py) or the serve protocol (test_serve.py)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook", reason="tinker-cookbook is a test dependency (scripts/setup.sh installs it)")

import torch  # noqa: E402
from test_serve import over_http, server  # noqa: E402, F401
from test_tinker_recipes import FACTS, in_process, metrics_by_step, recipe_fixture  # noqa: E402, F401

pytestmark = pytest.mark.slow
RENDERER = "qwen3_instruct"


@pytest.fixture(params=["in_process", "over_http"])
def model(request) -> str:
    """The default model's name, with the SDK pointed at the local backend in process or over HTTP."""
    got = request.getfixturevalue(request.param)
    return got if isinstance(got, str) else got[0]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def final_checkpoint(log_path: Path) -> dict:
    rows = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines() if line.strip()]
    return rows[-1]


def common_config(model: str, batch_size: int):
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    return ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=model, renderer_name=RENDERER, max_length=128, batch_size=batch_size
    )


def test_supervised_train_main_runs_evaluates_saves_and_its_loss_falls(model, tmp_path):
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder

    chats = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in FACTS
    ] * 5  # 20 rows: 4 held out for the NLL evaluator, 16 train in 4 batches of 4
    builder = FromConversationFileBuilder(
        common_config=common_config(model, 4), file_path=write_jsonl(tmp_path / "chats.jsonl", chats), test_size=4
    )
    log_path = tmp_path / "sl"
    config = train.Config(
        log_path=str(log_path),
        model_name=model,
        recipe_name="test_entry_points",
        renderer_name=RENDERER,
        dataset_builder=builder,
        learning_rate=4e-3,
        lr_schedule="constant",
        lora_rank=4,
        save_every=2,
        eval_every=2,
        max_steps=4,
    )
    torch.manual_seed(0)
    asyncio.run(train.main(config))
    steps = metrics_by_step(log_path)
    nll = [steps[step]["train_mean_nll"] for step in range(4)]
    assert all(math.isfinite(x) for x in nll) and nll[-1] < nll[0], nll
    assert any("test/nll" in row for row in steps.values()), steps  # the held-out split's evaluator ran
    saved = [json.loads(line)["name"] for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert saved[0] == "000002" and saved[-1] == "final", saved
    assert final_checkpoint(log_path)["state_path"].startswith("tinker://")


def preference_rows() -> list[dict]:
    """Each fact's true answer preferred over a wrong one (label A), as ComparisonBuilderFromJsonl reads them."""
    return [
        {
            "comparison": {
                "prompt_conversation": [{"role": "user", "content": q}],
                "completion_A": [{"role": "assistant", "content": a}],
                "completion_B": [{"role": "assistant", "content": "I do not know."}],
            },
            "label": "A",
        }
        for q, a in FACTS
    ]


def test_dpo_train_main_runs_and_logs_a_finite_dpo_loss(model, tmp_path):
    from tinker_cookbook.preference import train_dpo
    from tinker_cookbook.preference.dpo_datasets import DPODatasetBuilderFromComparisons
    from tinker_cookbook.preference.preference_datasets import ComparisonBuilderFromJsonl

    comparisons = ComparisonBuilderFromJsonl(train_path=write_jsonl(tmp_path / "prefs.jsonl", preference_rows()))
    log_path = tmp_path / "dpo"
    config = train_dpo.Config(
        log_path=str(log_path),
        model_name=model,
        recipe_name="test_entry_points",
        renderer_name=RENDERER,
        dataset_builder=DPODatasetBuilderFromComparisons(
            comparison_builder=comparisons, common_config=common_config(model, 2)
        ),
        learning_rate=1e-4,
        lora_rank=4,
        save_every=1,
        max_steps=2,
    )
    torch.manual_seed(0)
    train_dpo.main(config)
    steps = metrics_by_step(log_path)
    assert {0, 1} <= set(steps), steps
    assert all(math.isfinite(steps[step]["dpo_loss"]) for step in (0, 1)), steps
    assert steps[0]["dpo_loss"] == pytest.approx(math.log(2), abs=1e-3)  # policy == reference at the first step
    assert final_checkpoint(log_path)["state_path"].startswith("tinker://")


def arithmetic(model: str, groups: int, batches: int):
    from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder

    return ArithmeticDatasetBuilder(
        batch_size=groups, model_name_for_tokenizer=model, renderer_name=RENDERER, n_batches=batches, group_size=4
    )


def short_sampling_run() -> dict:
    """The settings RL and distillation share here: two steps of 8-token samples, rank 4, no saves or evals between."""
    return {"learning_rate": 1e-4, "max_tokens": 8, "lora_rank": 4, "save_every": 0, "eval_every": 0, "max_steps": 2}


def rl_mode(mode: str) -> dict:
    from tinker_cookbook.rl.train import AsyncConfig, StreamMinibatchConfig

    if mode == "async":
        return {"async_config": AsyncConfig(max_steps_off_policy=1, groups_per_batch=2)}
    if mode == "stream_minibatch":
        return {"stream_minibatch_config": StreamMinibatchConfig(groups_per_batch=2, num_minibatches=2)}
    return {}


@pytest.mark.parametrize("mode", ["sync", "async", "stream_minibatch"])
def test_rl_train_main_runs_two_steps_with_rewards_logged_and_a_final_checkpoint(model, tmp_path, mode):
    from tinker_cookbook.rl import train

    log_path = tmp_path / "rl"
    config = train.Config(
        log_path=str(log_path),
        model_name=model,
        recipe_name="test_entry_points",
        renderer_name=RENDERER,
        dataset_builder=arithmetic(model, groups=2, batches=4),
        **short_sampling_run(),
        **rl_mode(mode),
    )
    torch.manual_seed(0)
    asyncio.run(train.main(config))
    steps = metrics_by_step(log_path)
    assert {0, 1} <= set(steps), steps
    assert all(-1.0 <= steps[step]["env/all/reward/total"] <= 1.0 for step in (0, 1)), steps
    for step in (0, 1):  # a step whose groups all got equal rewards has zero advantages, so zero gradient
        row = steps[step]
        assert math.isfinite(row["grad_norm"]), row
        assert row["grad_norm"] > 0 or row["env/all/by_group/frac_mixed"] == 0, row
    assert final_checkpoint(log_path)["sampler_path"].startswith("tinker://")


def test_on_policy_distillation_main_runs_with_the_base_model_as_teacher(model, tmp_path):
    from tinker_cookbook.distillation import train_on_policy
    from tinker_cookbook.distillation.datasets import DistillationDatasetConfig, TeacherConfig

    log_path = tmp_path / "distill"
    config = train_on_policy.Config(
        log_path=str(log_path),
        model_name=model,
        recipe_name="test_entry_points",
        renderer_name=RENDERER,
        dataset_configs=[
            DistillationDatasetConfig(
                dataset_builder=arithmetic(model, groups=2, batches=4),
                teacher_config=TeacherConfig(base_model=model),
                groups_per_batch=2,
            )
        ],
        **short_sampling_run(),
    )
    torch.manual_seed(0)
    asyncio.run(train_on_policy.main(config))
    steps = metrics_by_step(log_path)
    assert {0, 1} <= set(steps), steps
    assert all(math.isfinite(steps[step]["teacher_kl"]) for step in (0, 1)), steps
    assert abs(steps[0]["teacher_kl"]) < 0.05, steps[0]  # the untrained student is its teacher: no divergence yet
    assert final_checkpoint(log_path)["sampler_path"].startswith("tinker://")
