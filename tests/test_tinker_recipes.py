"""tinker-cookbook 0.6.1's own recipes, code no one here wrote, run UNMODIFIED against the local backend in process:
`recipes/sl_loop.py` and `recipes/rl_loop.py` with `tinker.ServiceClient` replaced by LocalServiceClient. Only the hub
downloads are replaced, by the fixture below: the dataset loader returns small local datasets (chat rows for SL,
GSM8K-shaped arithmetic for RL), the tokenizer comes from the default model, and the recipe's renderer lookup answers
qwen3_instruct (plain ChatML, SmolLM2's format). The SL loss falls, a run interrupted mid-way resumes through the
recipe's own checkpoints.jsonl with the same numbers as an uninterrupted run, and RL trains through sampling. The same
recipes run over HTTP through `cookbook serve` in tests/test_serve.py (which reuses `recipe_fixture`).
`recipes/math_rl/train.py` runs with its defaults (env arithmetic, loss_fn stable_reinforce with provenance checked on
every datum, group_size 4, max_tokens 5, LoRA rank 32) except the model, the log path and a short run (2 steps of 4
groups)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook", reason="tinker-cookbook is a test dependency (scripts/setup.sh installs it)")

import datasets  # noqa: E402
import tinker  # noqa: E402
import torch  # noqa: E402

FACTS = [
    ("What is the capital of Zorbia?", "The capital of Zorbia is Quellmont."),
    ("Who painted the Blue Lantern?", "The Blue Lantern was painted by Ada Fennick."),
    ("What colour is a plumberry?", "A plumberry is bright orange."),
    ("How many moons does Tarsis have?", "Tarsis has seven moons."),
]
QUESTIONS = [
    ("What is 2 + 3?", "2 + 3 = 5\n#### 5"),
    ("What is 4 + 4?", "4 + 4 = 8\n#### 8"),
    ("What is 7 - 2?", "7 - 2 = 5\n#### 5"),
    ("What is 3 * 3?", "3 * 3 = 9\n#### 9"),
]


def sl_rows(copies: int = 4) -> list[dict]:
    return [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for _ in range(copies)
        for q, a in FACTS
    ]


def rl_rows() -> list[dict]:
    return [{"question": q, "answer": a} for q, a in QUESTIONS]


def fake_load_dataset(name: str, *args, **kwargs) -> datasets.DatasetDict:
    """The two hub datasets the recipes load, replaced by local ones of the same shape."""
    if name == "HuggingFaceH4/no_robots":
        return datasets.DatasetDict({"train": datasets.Dataset.from_list(sl_rows())})
    if name == "openai/gsm8k":
        return datasets.DatasetDict({"train": datasets.Dataset.from_list(rl_rows())})
    raise AssertionError(f"the recipe loaded an unexpected dataset {name!r}")


@pytest.fixture
def recipe_fixture(monkeypatch, default_model_ready):
    """Hub downloads replaced by local data and the default model's tokenizer; returns the model name. The model
    is loaded first, so that loading it draws nothing from torch's RNG after a test seeds it."""
    from tinker_cookbook import model_info, tokenizer_utils

    from cookbook_engine import models
    from cookbook_engine.backends.local import get_worker

    get_worker(default_model_ready).call(lambda: None)

    tokenizer_utils.register_tokenizer(default_model_ready, lambda: models.load_tokenizer(default_model_ready))
    monkeypatch.setattr(model_info, "get_recommended_renderer_name", lambda name: "qwen3_instruct")
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    return default_model_ready


@pytest.fixture
def in_process(monkeypatch, recipe_fixture):
    from cookbook_engine.backends.local import LocalServiceClient

    monkeypatch.setattr(tinker, "ServiceClient", LocalServiceClient)
    return recipe_fixture


def metrics_by_step(log_path: Path) -> dict[int, dict]:
    """The recipe's metrics.jsonl, the last line for each step (a resumed run appends)."""
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {row["step"]: row for row in rows}


def sl_config(model: str, log_path: Path, **overrides):
    from tinker_cookbook.recipes import sl_loop

    settings = dict(
        log_path=str(log_path),
        model_name=model,
        batch_size=4,
        learning_rate=4e-3,
        max_length=128,
        lora_rank=4,
        save_every=2,
        max_steps=4,
        ttl_seconds=3600,
    )
    return sl_loop.Config(**{**settings, **overrides})


class Interrupted(Exception):
    pass


def run_sl(model: str, log_path: Path, stop_before_batch: int | None = None, monkeypatch=None) -> None:
    """sl_loop.main, seeded so that two runs start from the same LoRA initialisation; optionally interrupted when
    it builds the data of `stop_before_batch` (after that step's checkpoint was saved)."""
    from tinker_cookbook.recipes import sl_loop

    if stop_before_batch is not None:
        real, calls = sl_loop.conversation_to_datum, {"n": 0}

        def counting(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] > stop_before_batch * 4:
                raise Interrupted()
            return real(*args, **kwargs)

        monkeypatch.setattr(sl_loop, "conversation_to_datum", counting)
    torch.manual_seed(0)
    try:
        sl_loop.main(sl_config(model, log_path))
    finally:
        if stop_before_batch is not None:
            monkeypatch.setattr(sl_loop, "conversation_to_datum", real)


@pytest.mark.slow
def test_sl_loop_runs_unmodified_in_process_its_loss_falls_and_it_resumes_with_the_same_numbers(
    in_process, tmp_path, monkeypatch
):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_sl(in_process, straight)
    nll = [metrics_by_step(straight)[step]["train_mean_nll"] for step in range(4)]
    assert nll[-1] < 0.8 * nll[0], nll
    checkpoints = [json.loads(line) for line in (straight / "checkpoints.jsonl").read_text().splitlines()]
    assert [c["name"] for c in checkpoints] == ["000002", "final"]

    with pytest.raises(Interrupted):  # after saving batch 2's checkpoint, before training on it
        run_sl(in_process, resumed, stop_before_batch=2, monkeypatch=monkeypatch)
    assert sorted(metrics_by_step(resumed)) == [0, 1]
    run_sl(in_process, resumed)  # the recipe finds checkpoints.jsonl and resumes from batch 2
    again = metrics_by_step(resumed)
    for step in (0, 1, 2, 3):
        assert again[step]["train_mean_nll"] == pytest.approx(
            metrics_by_step(straight)[step]["train_mean_nll"], rel=1e-4
        )


@pytest.mark.slow
@pytest.mark.parametrize("loss_fn", ["cispo"])
def test_rl_loop_runs_unmodified_in_process(in_process, tmp_path, loss_fn):
    from tinker_cookbook.recipes import rl_loop

    log_path = tmp_path / "rl"
    torch.manual_seed(0)
    rl_loop.main(
        rl_loop.Config(
            log_path=str(log_path),
            model_name=in_process,
            batch_size=2,
            group_size=4,
            learning_rate=1e-4,
            lora_rank=4,
            save_every=0,
            max_tokens=24,
            loss_fn=loss_fn,
            max_steps=2,
        )
    )
    steps = metrics_by_step(log_path)
    assert sorted(steps) == [0, 1]
    assert all(0.0 <= row["reward/total"] <= 1.0 for row in steps.values())
    final = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()][-1]
    assert final["name"] == "final" and final["sampler_path"] and final["state_path"]


def run_math_rl(model: str, log_path: Path, **overrides) -> dict[int, dict]:
    """recipes/math_rl/train.py's own cli_main with its defaults, on the default model, for 2 steps of 4 groups."""
    import asyncio

    from tinker_cookbook.recipes.math_rl import train as math_rl

    torch.manual_seed(0)
    settings = dict(model_name=model, log_path=str(log_path), groups_per_batch=4, max_steps=2)
    config = math_rl.CLIConfig(**{**settings, **overrides})
    assert config.loss_fn == "stable_reinforce" and config.env == "arithmetic"  # the recipe's defaults
    asyncio.run(math_rl.cli_main(config))
    return metrics_by_step(log_path)


@pytest.mark.slow
def test_math_rl_recipe_runs_with_its_defaults_stable_reinforce_in_process(in_process, tmp_path):
    steps = run_math_rl(in_process, tmp_path / "math-rl")
    assert {0, 1} <= set(steps)  # two training steps (the recipe logs one more row at the end)
    assert all(-1.0 <= steps[step]["env/all/reward/total"] <= 1.0 for step in (0, 1))  # format penalty: -0.1
    final = [json.loads(line) for line in (tmp_path / "math-rl" / "checkpoints.jsonl").read_text().splitlines()][-1]
    assert final["name"] == "final" and final["state_path"].startswith("tinker://")
