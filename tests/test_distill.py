"""On-policy distillation and the RL KL penalty: the per-token advantage arithmetic against tinker-cookbook's own
formulas (rl/metrics.py and distillation/train_on_policy.py's incorporate_kl_penalty, run here unmodified on the
same datums), the settings a distillation run refuses (teacher = student, no teacher), and, on the real default
model (slow), a distillation run and an RL run with a KL penalty that train and log their KL metrics."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable
from types import SimpleNamespace

import numpy as np
import pytest
from tinker import types

from cookbook_engine import config as cfg
from cookbook_engine.rl import kl
from cookbook_engine.rl.data import datum_from_rollout
from cookbook_engine.rl.types import Rollout


class TableSamplingClient:
    """Scores token t of any sequence as table[t] (index 0: None, as the SDK's compute_logprobs)."""

    def __init__(self, table: dict[int, float]):
        self.table = table

    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float | None]:
        tokens = prompt.to_ints()
        return [None] + [self.table.get(t, -2.0) for t in tokens[1:]]

    def compute_logprobs(self, prompt: types.ModelInput) -> Awaitable:  # the SDK's shape: .coroutine()
        return SimpleNamespace(coroutine=lambda: self.compute_logprobs_async(prompt))

    def sample(self, prompt: types.ModelInput, num_samples: int, sampling_params, include_prompt_logprobs=False):
        """The request tinker-cookbook's score_sequences makes: prompt log-probs, one token sampled."""

        async def response():
            logprobs = await self.compute_logprobs_async(prompt)
            return SimpleNamespace(prompt_logprobs=logprobs, prompt_cache_hit_tokens=0, sequences=[])

        return SimpleNamespace(coroutine=response)


def rollout_datums() -> list[types.Datum]:
    rollouts = [
        Rollout([1, 5, 6], [7, 8, 2], [-0.5, -1.5, -0.1], "stop", 0.0, {}, {}),
        Rollout([1, 5, 6], [9, 2], [-3.0, -0.1], "stop", 1.0, {}, {}),
    ]
    return [datum_from_rollout(r, adv) for r, adv in zip(rollouts, (-0.5, 0.5))]


TEACHER = TableSamplingClient({7: -0.4, 8: -0.3, 9: -4.0, 2: -0.1, 5: -1.0, 6: -1.0})


def advantages(data_D: list[types.Datum]) -> list[np.ndarray]:
    return [d.loss_fn_inputs["advantages"].to_numpy() for d in data_D]


def test_kl_penalty_equals_tinker_cookbooks_formula():
    from tinker_cookbook.rl.metrics import incorporate_kl_penalty

    ours, theirs = rollout_datums(), rollout_datums()
    metrics = asyncio.run(kl.add_kl_penalty(ours, TEACHER, 0.3))
    their_metrics, _ = asyncio.run(incorporate_kl_penalty(theirs, TEACHER, 0.3, 0.0))
    for a, b in zip(advantages(ours), advantages(theirs)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert metrics["kl_policy_base"] == pytest.approx(their_metrics["kl_policy_base"], abs=1e-6)
    # the prompt positions keep advantage 0; the penalty moved the completion's tokens
    assert all(a[:2].tolist() == [0.0, 0.0] for a in advantages(ours))
    assert not np.allclose(advantages(ours)[0][2:], -0.5)


def test_teacher_advantages_equal_tinker_cookbooks_distillation():
    from tinker_cookbook.distillation.train_on_policy import incorporate_kl_penalty

    ours, theirs = rollout_datums(), rollout_datums()
    metrics = asyncio.run(kl.add_teacher_advantages(ours, TEACHER, 1.0))
    their_metrics = asyncio.run(incorporate_kl_penalty(theirs, [TEACHER, TEACHER], [0, 0], 1.0, 0.0))
    for a, b in zip(advantages(ours), advantages(theirs)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert metrics["teacher_kl"] == pytest.approx(their_metrics["teacher_kl"], abs=1e-6)
    # token 9 (student -3.0, teacher -4.0) is pushed down; token 7 (student -0.5, teacher -0.4) up
    second = advantages(ours)[1]
    assert second[2] < 0.5 and advantages(ours)[0][2] > -0.5


def test_a_teacher_equal_to_the_student_gives_no_signal():
    data_D = rollout_datums()
    student = {7: -0.5, 8: -1.5, 2: -0.1, 9: -3.0}
    before = copy.deepcopy(advantages(data_D))
    metrics = asyncio.run(kl.add_teacher_advantages(data_D, TableSamplingClient(student), 1.0))
    assert metrics["teacher_kl"] == pytest.approx(0.0, abs=1e-6)
    for a, b in zip(advantages(data_D), before):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "teacher: required"),
        (["teacher=base"], "the teacher is the student"),
        (["teacher=/ckpt/a", "start_checkpoint=/ckpt/a"], "the teacher is the student"),
        (["teacher=/ckpt/a", "dataset= "], "dataset: required"),
        (["teacher=/ckpt/a", "kl_penalty_coef=0"], "kl_penalty_coef"),
    ],
)
def test_bad_distillation_settings_are_refused_with_one_message(args, message):
    config = cfg.parse_overrides("distill", args) if "kl_penalty_coef=0" not in args else None
    if config is None:
        with pytest.raises(cfg.ConfigError, match=message):
            cfg.check(cfg.parse_overrides("distill", args))
        return
    problems = cfg.validate(config)
    assert any(message in p for p in problems), problems


def test_the_cli_refuses_a_teacher_equal_to_the_student_and_writes_nothing(home, capsys):
    from cookbook_engine import cli

    assert cli.main(["distill", "teacher=base", "--dry-run"]) == 2
    assert "teacher is the student" in capsys.readouterr().err
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@pytest.mark.parametrize(
    "kind, args, key",
    [
        ("distill", ["teacher={missing}"], "teacher"),
        ("distill", ["teacher=base", "start_checkpoint={missing}"], "start_checkpoint"),
        ("rl", ["kl_penalty_coef=0.1", "kl_reference={missing}"], "kl_reference"),
        ("dpo", ["start_checkpoint={missing}"], "start_checkpoint"),
    ],
)
def test_a_checkpoint_path_with_no_checkpoint_is_refused_before_a_run_is_written(home, capsys, kind, args, key):
    """A mistyped teacher or start checkpoint used to start a run that failed when it loaded the weights."""
    from cookbook_engine import cli

    missing = home / "checkpoints" / "no-such-run" / "state" / "final"
    assert cli.main([kind, *[a.format(missing=missing) for a in args]]) == 2
    assert f"{key}={missing}: no checkpoint there" in capsys.readouterr().err
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_malformed_tinker_path_is_refused_with_the_form_it_should_have(home, capsys):
    from cookbook_engine import cli

    assert cli.main(["distill", "teacher=tinker://nothing"]) == 2
    assert "teacher=tinker://nothing: checkpoint path 'tinker://nothing': expected tinker://" in capsys.readouterr().err
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_checkpoint_folder_with_its_adapter_is_accepted(tmp_path):
    from cookbook_engine.runs import checkpoint_problems

    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    assert checkpoint_problems(cfg.parse_overrides("distill", [f"teacher={tmp_path}"])) == []
    assert checkpoint_problems(cfg.parse_overrides("distill", ["teacher=base", f"start_checkpoint={tmp_path}"])) == []
    hosted = cfg.parse_overrides("distill", ["backend=tinker", "teacher=Qwen/Qwen3-8B"])
    assert checkpoint_problems(hosted) == []


def test_a_run_resuming_from_its_own_checkpoint_no_longer_needs_its_start_checkpoint(tmp_path):
    """Deleting the checkpoint a run started from must not stop that run from resuming; its teacher it still needs."""
    from cookbook_engine.runs import checkpoint_problems

    gone = tmp_path / "deleted" / "state" / "final"
    config = cfg.parse_overrides("distill", [f"teacher={tmp_path}", f"start_checkpoint={gone}"])
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    assert checkpoint_problems(config, resuming=True) == []
    assert [p.split(":")[0] for p in checkpoint_problems(config)] == [f"start_checkpoint={gone}"]
    missing_teacher = cfg.parse_overrides("distill", [f"teacher={gone}"])
    assert checkpoint_problems(missing_teacher, resuming=True)


def test_distill_and_kl_settings_round_trip_through_the_command_line():
    config = cfg.parse_overrides("distill", ["teacher=/ckpt/a", "max_tokens=32", "kl_penalty_coef=0.5"])
    assert cfg.parse_overrides("distill", cfg.to_command(config).split()[2:]) == config
    rl = cfg.parse_overrides("rl", ["kl_penalty_coef=0.05", "kl_reference=/ckpt/b"])
    assert (rl.kl_penalty_coef, rl.kl_reference) == (0.05, "/ckpt/b")


def test_the_new_run_form_offers_prompt_files_as_a_distillations_prompts(home):
    """An RL run's teacher is distilled on prompts with answers (builtin:sums), not only on chat datasets."""
    from tests.test_studio_apptest import by_label, open_page, shown_text

    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("distill").run()
    prompts = by_label(at.selectbox, "Prompts")
    assert {"facts", "persona", "sums", "arithmetic-qa"} <= set(prompts.options)
    assert "concise-prefs" not in prompts.options  # pairs are no prompts
    prompts.set_value("sums").run()
    assert "The 288 sums the RL default (env=arithmetic) trains on" in shown_text(at)
