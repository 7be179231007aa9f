"""RL: advantages, datums, metrics and envs as a user relies on them, input checks before a run exists, and (slow)
runs on the real default model: every rollout lands in the transcripts table, a cancelled run resumes where it
stopped, and a short run with the default settings raises held-out two-digit accuracy above the base model's
interval."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest
from tinker import types

from cookbook_engine import cli, config as cfg, models, paths, renderers
from cookbook_engine.config import (
    ConfigError,
    RLConfig,
    SLConfig,
    from_dict,
    parse_overrides,
    to_command,
    to_dict,
    validate,
)
from cookbook_engine.data import loading as datasets
from cookbook_engine.evals import sets, stats
from cookbook_engine.evals.retention import retention_of_job
from cookbook_engine.rl import arithmetic, envs, loop, suggested
from cookbook_engine.rl.advantages import centered_advantages, group_advantages, is_constant
from cookbook_engine.rl.data import datum_from_rollout, for_training, sample_train_metrics
from cookbook_engine.rl.metrics import rollout_metrics
from cookbook_engine.rl.types import Rollout, RolloutGroup
from cookbook_engine.runs import RunManager, preflight
from cookbook_engine.training import lora_a
from cookbook_engine.training.learning_rate import learning_rate, learning_rate_with_reason
from cookbook_engine.training.lora_a import lora_a_used
from storage import Store
from storage.evals import EvalStore


@pytest.fixture(scope="module")
def renderer(default_model_ready):
    return renderers.get_renderer("auto", models.load_tokenizer(models.DEFAULT_MODEL))


def reply_tokens(renderer, text: str, stopped: bool = True) -> list[int]:
    tokens = renderer.tokenizer.encode(text, add_special_tokens=False)
    return tokens + ([renderer.get_stop_sequences()[0]] if stopped else [])


def rollout(reward: float, tokens=(5, 6, 7), prompt=(1, 2, 3, 4), metrics=None) -> Rollout:
    return Rollout(list(prompt), list(tokens), [-0.5] * len(tokens), "stop", reward, metrics or {}, {})


# ------------------------------------------------------------------------------------------------ pure pieces


def test_advantages_are_reward_minus_group_mean_and_constant_groups_are_detected():
    assert centered_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    assert centered_advantages([1.0, -0.1, 0.0]) == pytest.approx([0.7, -0.4, -0.3])
    assert is_constant([1.0, 1.0, 1.0]) and is_constant([-0.1, -0.1])
    assert not is_constant([1.0, 0.9])


def test_scale_rewards_group_divides_by_the_group_std_and_the_loop_trains_with_it():
    one_right_of_8 = [1.0] + [0.0] * 7
    assert group_advantages(one_right_of_8, "none") == centered_advantages(one_right_of_8)
    scaled = group_advantages(one_right_of_8, "group")
    assert scaled[0] == pytest.approx(0.875 / (7**0.5 / 8), rel=1e-5)  # 2.65: the rare right reply weighs more
    assert scaled[1:] == pytest.approx([-0.125 / (7**0.5 / 8)] * 7, rel=1e-5) and sum(scaled) == pytest.approx(0)
    assert group_advantages([1.0, 0.0, 1.0, 0.0], "group") == pytest.approx([1.0, -1.0, 1.0, -1.0], rel=1e-5)
    groups = [
        loop.SampledGroup(RolloutGroup([rollout(r) for r in one_right_of_8], []), 0, 0, 0, None),
        loop.SampledGroup(RolloutGroup([rollout(1.0), rollout(1.0)], []), 0, 0, 1, None),  # all equal: dropped
    ]

    def trained_advantages(scale: str) -> list[float]:
        data_D = loop.datums_of(groups, RLConfig(scale_rewards=scale))
        return [datum.loss_fn_inputs["advantages"].to_numpy()[-1] for datum in data_D]

    assert trained_advantages("none") == pytest.approx(centered_advantages(one_right_of_8))
    assert trained_advantages("group") == pytest.approx(scaled, rel=1e-5)
    with pytest.raises(ConfigError, match="scale_rewards"):
        preflight(parse_overrides("rl", ["scale_rewards=batch"]))
    # a run stored before the setting existed trained without scaling, and resumes so; a stored choice is kept
    stored_before = from_dict("rl", {"env": "arithmetic", "max_steps": 36})
    assert stored_before.scale_rewards == "none" and stored_before.anchor.dataset == ""  # nor was it anchored
    assert from_dict("rl", to_dict(RLConfig())) == RLConfig()


def test_a_rollout_becomes_a_shifted_datum_with_sampler_logprobs_advantages_and_mask_on_the_completion():
    rolled = Rollout([10, 11, 12], [20, 21], [-0.25, -1.5], "stop", 1.0, {}, {})
    datum = datum_from_rollout(rolled, advantage=0.75)
    assert datum.model_input.to_ints() == [10, 11, 12, 20]
    inputs = {key: value.to_numpy().tolist() for key, value in datum.loss_fn_inputs.items()}
    assert inputs["target_tokens"] == [11, 12, 20, 21]
    assert inputs["logprobs"] == [0.0, 0.0, -0.25, -1.5]
    assert inputs["advantages"] == [0.0, 0.0, 0.75, 0.75]
    assert inputs["mask"] == [0.0, 0.0, 1.0, 1.0]
    sent = for_training(datum)
    assert sorted(sent.loss_fn_inputs) == ["advantages", "logprobs", "target_tokens"]  # the SDK rejects "mask"


def test_kl_sample_train_and_entropy_count_completion_tokens_only():
    datum = datum_from_rollout(Rollout([1, 2, 3], [4, 5], [-1.0, -2.0], "stop", 1.0, {}, {}), 1.0)
    trainer = types.TensorData(data=[-9.0, -9.0, -1.5, -2.5], dtype="float32")  # prompt positions are ignored
    output = types.ForwardBackwardOutput(loss_fn_output_type="x", loss_fn_outputs=[{"logprobs": trainer}], metrics={})
    metrics = sample_train_metrics([datum], output)
    assert metrics["optim/kl_sample_train"] == pytest.approx(0.5)  # mean of (-1 - -1.5, -2 - -2.5)
    assert metrics["optim/entropy"] == pytest.approx(1.5)


def test_substeps_split_the_batch_into_nearly_equal_parts():
    assert [len(c) for c in loop.split_substeps(list(range(10)), 3)] == [4, 3, 3]
    assert [len(c) for c in loop.split_substeps(list(range(2)), 4)] == [1, 1]
    assert sum(loop.split_substeps(list(range(7)), 1), []) == list(range(7))


def test_rollout_metrics_use_the_cookbook_names_and_split_by_tag():
    groups = [
        RolloutGroup(
            [
                rollout(1.0, metrics={"correct": 1.0, "format": 1.0}),
                rollout(-0.1, tokens=(5,), metrics={"correct": 0.0, "format": 0.0}),
            ],
            ["add"],
        ),
        RolloutGroup(
            [
                rollout(1.0, metrics={"correct": 1.0, "format": 1.0}),
                rollout(1.0, metrics={"correct": 1.0, "format": 1.0}),
            ],
            ["multiply"],
        ),
    ]
    metrics = rollout_metrics(groups)
    assert metrics["env/all/reward/total"] == pytest.approx((1.0 - 0.1 + 1.0 + 1.0) / 4)
    assert metrics["env/all/correct"] == pytest.approx(0.75)
    assert metrics["env/all/format"] == pytest.approx(0.75)
    assert metrics["env/all/ac_tokens_per_turn"] == pytest.approx((3 + 1 + 3 + 3) / 4)
    assert metrics["env/all/by_group/frac_mixed"] == 0.5 and metrics["env/all/by_group/frac_all_good"] == 0.5
    assert metrics["env/add/correct"] == 0.5 and metrics["env/multiply/correct"] == 1.0


# ------------------------------------------------------------------------------------------------ envs


def step(env, text: str, stopped: bool = True):
    return asyncio.run(env.step(reply_tokens(env.renderer, text, stopped)))


def test_arithmetic_env_rewards_the_committed_number_with_a_small_format_term(renderer):
    problem = envs.ArithmeticProblem(7, "*", 3)
    env = envs.ArithmeticEnv(renderer, problem)
    prompt, stop = asyncio.run(env.initial_observation())
    text = renderer.tokenizer.decode(prompt.to_ints())
    assert "What is 7 * 3? Answer with just the number." in text and text.endswith("assistant\n")
    assert stop == renderer.get_stop_sequences()
    assert step(env, "7 * 3 = 21").reward == 1.0
    assert step(env, "21").metrics == {"correct": 1.0, "format": 1.0, "hedged": 0.0}
    hedge = step(env, "20 or 21 or 22")  # several candidates: no committed number (rl/text_graders.py), flagged
    assert hedge.metrics == {"correct": 0.0, "format": 0.0, "hedged": 1.0} and hedge.reward == pytest.approx(-0.1)
    wrong = step(env, "7 * 3 = 24")
    assert wrong.reward == 0.0 and wrong.metrics["correct"] == 0.0 and wrong.logs["answer"] == 21
    assert step(env, "It is twenty-one.").reward == pytest.approx(-0.1)  # no number: bad format
    cut = step(env, "Let me think about 7 * 3 = 21 and", stopped=False)  # hit max_tokens
    assert cut.metrics == {"correct": 1.0, "format": 0.0, "hedged": 0.0} and cut.reward == pytest.approx(0.9)


def test_the_arithmetic_envs_partial_credit_setting_reaches_its_grading(renderer):
    """partial_credit (RL's default, rl/suggested.py) scores a wrong answer's digits in place in training and in the
    run's held-out check alike; the `correct` metric stays right or wrong; partial_credit=0 scores it 0."""
    for partial in (RLConfig().partial_credit, 0.0):
        setup = envs.build_env(RLConfig(partial_credit=partial, groups_per_batch=1, num_eval_problems=1), renderer)
        for builder in (setup.train.get_batch(0)[0], setup.test[0]):
            env = asyncio.run(builder.make_envs())[0]
            answer = str(env.problem.answer)
            wrong = answer[:-1] + str((int(answer[-1]) + 1) % 10)  # the last digit off by one
            result = step(env, wrong)
            share = (len(answer) - 1) / len(answer)
            assert result.reward == pytest.approx(partial * share) and result.metrics["correct"] == 0.0
    assert RLConfig().partial_credit > 0


def problems_of(builders) -> list:
    return [asyncio.run(b.make_envs())[0].problem for b in builders]


def test_arithmetic_holds_out_a_fixed_set_of_two_digit_problems_that_training_never_draws():
    held_out = arithmetic.held_out_problems()
    assert len(held_out) == arithmetic.HELD_OUT_SIZE == 100 and held_out == arithmetic.held_out_problems()
    assert all(10 <= p.a <= 99 and 10 <= p.b <= 99 for p in held_out)
    assert len({p.key for p in held_out}) == len(held_out)  # distinct, counting 12 + 34 and 34 + 12 as one
    assert sets.load_eval_set("builtin:arithmetic").examples == [
        sets.GenerationExample(p.question, str(p.answer), "numeric") for p in held_out
    ]  # the eval set is this list
    keys = {p.key for p in held_out}
    fresh = {p.key for p in arithmetic.fresh_problems("+", *arithmetic.TWO_DIGITS)}
    for seed in (0, 1, 7):
        config = RLConfig(seed=seed, max_steps=40, groups_per_batch=8, num_eval_problems=32)
        setup = envs.build_env(config, renderer=None)  # envs are made lazily; grading is not exercised here
        assert problems_of(setup.test) == held_out[:32]  # whatever the seed
        trained = [p for step in range(40) for p in problems_of(setup.train.get_batch(step))]
        assert len(trained) == 40 * 8 and not {p.key for p in trained} & keys
        assert not {p.key for p in trained} & fresh  # builtin:arithmetic-fresh is never trained on either
        assert problems_of(setup.train.get_batch(3)) == problems_of(setup.train.get_batch(3))  # same on resume
    swapped = arithmetic.ArithmeticProblem(held_out[0].b, "+", held_out[0].a)
    assert arithmetic.is_held_out(swapped)  # b + a is the same problem to the model


def test_arithmetic_curriculum_grows_operands_to_cover_the_held_out_range():
    total = 40
    bounds = [arithmetic.operand_bound(step, total) for step in range(total)]
    assert bounds[0] == arithmetic.CURRICULUM_START_MAX and bounds == sorted(bounds)
    assert bounds[int(total * arithmetic.CURRICULUM_RAMP)] == 99 and bounds[-1] == 99
    early = [p for step in range(4) for p in arithmetic.training_problems(0, step, total, 8)]
    late = [p for step in range(total // 2, total) for p in arithmetic.training_problems(0, step, total, 8)]
    assert max(max(p.a, p.b) for p in early) <= bounds[3]
    late_operands = {n for p in late for n in (p.a, p.b)}
    held_out = arithmetic.held_out_problems()
    low, high = min(min(p.a, p.b) for p in held_out), max(max(p.a, p.b) for p in held_out)
    assert min(late_operands) <= low and max(late_operands) >= high  # the held-out range is covered
    assert sum(p.a >= 10 and p.b >= 10 for p in late) / len(late) > 0.7  # mostly two-digit once ramped up
    assert {p.op for p in late} == set(arithmetic.TRAIN_OPS) >= set(arithmetic.HELD_OUT_OPS)


def test_arithmetic_curriculum_trains_mostly_on_sums_that_carry():
    """The trained model's wrong answers were nearly all a missed carry, so each step's sums are CARRY_SHARE carrying
    ones, where uniformly drawn two-digit sums carry under half the time (the fresh evaluation set's share)."""
    assert arithmetic.ArithmeticProblem(38, "+", 24).carries and not arithmetic.ArithmeticProblem(31, "+", 24).carries
    assert not arithmetic.ArithmeticProblem(38, "-", 24).carries
    total, count = 36, 8
    for step in (0, total // 2, total - 1):
        sums = [p for p in arithmetic.training_problems(3, step, total, count) if p.op == "+"]
        assert sum(p.carries for p in sums) == round(arithmetic.CARRY_SHARE * count)
    fresh = arithmetic.fresh_problems("+", *arithmetic.TWO_DIGITS)
    assert 0.35 < sum(p.carries for p in fresh) / len(fresh) < 0.55 < arithmetic.CARRY_SHARE
    setup = envs.build_env(RLConfig(max_steps=0, num_epochs=2), renderer=None)
    prepared = loop.PreparedRL(setup, "auto", None, 0)
    assert loop.plan(RLConfig(max_steps=0, num_epochs=2), prepared).total_steps == 2 * arithmetic.STEPS_PER_EPOCH


def test_code_env_reward_is_the_fraction_of_unit_tests_passed_in_the_sandbox(renderer):
    from cookbook_engine.rl.code_problems import CODE_PROBLEMS

    problem = next(p for p in CODE_PROBLEMS if p.name == "factorial")
    env = envs.CodeEnv(renderer, problem)
    right = step(env, "```python\ndef factorial(n):\n    return 1 if n <= 1 else n * factorial(n - 1)\n```")
    assert right.reward == 1.0 and right.metrics["tests_passed"] == right.metrics["tests_total"] == 4
    partly = step(env, "```python\ndef factorial(n):\n    return n\n```")  # right for factorial(1) only
    assert partly.metrics["tests_passed"] == 1 and partly.reward == pytest.approx(0.25)
    crashing = step(env, "```python\ndef factorial(n):\n    raise SystemExit(3)\n```")
    assert crashing.reward == 0.0 and crashing.metrics["correct"] == 0.0
    no_block = step(env, "def factorial(n): return 1")
    assert no_block.metrics["format"] == 0.0 and no_block.reward == pytest.approx(-0.1)
    assert "error" in no_block.logs


def test_code_rollouts_that_touch_the_hacking_surface_are_flagged_and_counted(renderer):
    from cookbook_engine.rl.code_problems import CODE_PROBLEMS
    from cookbook_engine.rl.metrics import SUSPICIOUS_FRAC

    env = envs.CodeEnv(renderer, next(p for p in CODE_PROBLEMS if p.name == "square"))
    honest = step(env, "```python\ndef square(x):\n    return x * x\n```")
    hack = step(env, "```python\nimport sys\nsys.modules['__main__'].x = 1\ndef square(x):\n    return 0\n```")
    assert honest.logs["suspicious"] == [] and honest.metrics["hack_flagged"] == 0.0
    assert hack.logs["suspicious"] == ["sys.modules", "__main__"] and hack.metrics["hack_flagged"] == 1.0
    group = RolloutGroup([rollout(r.reward, metrics=r.metrics) for r in (honest, honest, honest, hack)], ["code"])
    metrics = rollout_metrics([group])
    assert metrics[SUSPICIOUS_FRAC] == 0.25 and "env/all/hack_flagged" not in metrics
    assert SUSPICIOUS_FRAC not in rollout_metrics([RolloutGroup([rollout(1.0), rollout(0.0)], [])])  # not a code env


def test_custom_env_grades_with_the_chosen_grader(renderer, tmp_path):
    path = tmp_path / "capitals.jsonl"
    rows = [
        {"prompt": f"Capital of {c}?", "answer": a}
        for c, a in [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"), ("Peru", "Lima")]
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    setup = envs.build_env(RLConfig(env="custom", dataset=str(path), grader="contains", groups_per_batch=2), renderer)
    assert len(setup.test) == 1 and len(setup.train.problems) == 4
    env = asyncio.run(setup.train.get_batch(0)[0].make_envs())[0]
    answer = env.problem.answer
    assert step(env, f"It is {answer.lower()}.").reward == 1.0
    assert step(env, "I do not know.").reward == 0.0
    regex = envs.CustomEnv(renderer, datasets.RLProblem("Say a year.", r"^\d{4}$", "regex"))
    assert step(regex, "1999").reward == 1.0 and step(regex, "in 1999").reward == 0.0


# ------------------------------------------------------------------------------------------------ input checks


def test_bad_rl_settings_and_data_fail_before_a_run_exists(home, default_model_ready, tmp_path):
    with pytest.raises(ConfigError, match="env=custom needs a prompt/answer file"):
        preflight(parse_overrides("rl", ["env=custom"]))
    with pytest.raises(ConfigError, match="group_size=1"):
        preflight(parse_overrides("rl", ["group_size=1"]))
    with pytest.raises(ConfigError, match="env=chess"):
        preflight(parse_overrides("rl", ["env=chess"]))
    with pytest.raises(ConfigError, match="num_eval_problems=500"):
        preflight(parse_overrides("rl", ["num_eval_problems=500"]))
    with pytest.raises(ConfigError, match="choose one"):
        preflight(parse_overrides("rl", ["max_steps_off_policy=2", "stream_minibatch=true"]))
    with pytest.raises(ConfigError, match="num_minibatches=3 must divide the 8 groups"):
        preflight(parse_overrides("rl", ["stream_minibatch=true", "num_minibatches=3"]))
    with pytest.raises(ConfigError, match="num_substeps=3 must divide groups_per_batch=8"):
        preflight(parse_overrides("rl", ["stream_minibatch=true", "num_substeps=3"]))
    with pytest.raises(ConfigError, match="only with pipelining.stream_minibatch=true"):
        preflight(parse_overrides("rl", ["num_minibatches=2"]))
    with pytest.raises(ConfigError, match="max_steps_off_policy=-1"):
        preflight(parse_overrides("rl", ["max_steps_off_policy=-1"]))
    missing = tmp_path / "rows.jsonl"
    missing.write_text(json.dumps({"prompt": "What is 2 + 2?"}) + "\n")
    with pytest.raises(datasets.DatasetError, match="answer"):
        preflight(parse_overrides("rl", ["env=custom", f"dataset={missing}"]))
    long_prompt = tmp_path / "long.jsonl"
    long_prompt.write_text(json.dumps({"prompt": "word " * 300, "answer": "1"}) + "\n")
    with pytest.raises(datasets.DatasetError, match="exceeds max_length=256"):
        preflight(parse_overrides("rl", ["env=custom", f"dataset={long_prompt}", "max_length=256"]))
    assert Store.default().list_runs() == []


def test_pipelining_settings_parse_from_the_command_line_and_are_accepted():
    streaming = parse_overrides(
        "rl", ["pipelining.stream_minibatch=true", "pipelining.num_minibatches=2", "num_substeps=2"]
    )
    assert streaming.pipelining.stream_minibatch and streaming.pipelining.num_minibatches == 2
    command = to_command(streaming)
    assert "pipelining.stream_minibatch=true" in command and "pipelining.num_minibatches=2" in command
    assert parse_overrides("rl", command.split()[2:]) == streaming  # the command starts the same run
    off_policy = parse_overrides("rl", ["max_steps_off_policy=2", "loss_fn=ppo"])  # the flat name of before
    assert off_policy.pipelining.max_steps_off_policy == 2
    assert validate(streaming) == [] and validate(off_policy) == []


def test_a_code_run_says_in_its_log_when_the_sandbox_cannot_isolate_the_network(monkeypatch):
    from cookbook_engine import sandbox

    open_network = {
        "network_isolated": False,
        "network_method": "none",
        "description": "bare unprivileged uid",
        "reason": "this machine does not allow a network namespace here",
        "filesystem": "unprivileged",
    }
    monkeypatch.setattr(sandbox, "sandbox_capabilities", lambda: dict(open_network))
    note = loop.sandbox_note(RLConfig(env="code"))
    assert "network is NOT isolated" in note and "does not allow a network namespace" in note
    assert "NOT isolated" in loop.sandbox_note(RLConfig(env="custom", dataset="x.jsonl", grader="python_tests"))
    assert loop.sandbox_note(RLConfig(env="arithmetic")) is None
    monkeypatch.setattr(sandbox, "sandbox_capabilities", lambda: {**open_network, "network_isolated": True})
    assert "network isolated" in loop.sandbox_note(RLConfig(env="code"))


def test_train_mlp_auto_is_attention_only_only_where_that_was_measured():
    """RL's default train_mlp=auto: attention only for the default model on the arithmetic env (measured), the MLP
    too on other envs, hosted models and SL (never measured there); a set value wins; auto never leaves LoRA
    nothing to train."""
    assert RLConfig().train_mlp is None and not suggested.train_mlp_used(RLConfig())
    assert suggested.train_mlp_used(RLConfig(env="code"))
    assert suggested.train_mlp_used(RLConfig(backend="tinker", model="meta-llama/Llama-3.2-1B"))
    assert suggested.train_mlp_used(SLConfig()) and suggested.train_mlp_used(SLConfig(train_mlp=None))
    assert suggested.train_mlp_used(RLConfig(train_mlp=True))
    assert not suggested.train_mlp_used(RLConfig(env="code", train_mlp=False))
    assert suggested.train_mlp_used(RLConfig(train_attn=False))
    assert cfg.validate(RLConfig(train_attn=False)) == []
    assert cfg.parse_overrides("rl", ["train_mlp=auto"]).train_mlp is None


def test_the_default_rl_settings_are_the_measured_ones_and_far_settings_are_named():
    config = RLConfig()
    measured = suggested.ARITHMETIC
    assert (
        config.group_size,
        config.groups_per_batch,
        config.temperature,
        config.max_steps,
        config.max_tokens,
        config.scale_rewards,
        suggested.train_mlp_used(config),
        lora_a_used(config),
    ) == (
        measured.group_size,
        measured.groups_per_batch,
        measured.temperature,
        measured.max_steps,
        measured.max_tokens,
        measured.scale_rewards,
        measured.train_mlp,
        measured.lora_a,
    )
    assert learning_rate(config) == measured.learning_rate  # learning_rate=auto: the measured rate
    assert learning_rate(RLConfig(learning_rate=1e-4)) == 1e-4
    assert learning_rate(RLConfig(env="code")) == pytest.approx(1e-3 * suggested.RL_LR_SCALE)  # not measured
    assert "sweep" in learning_rate_with_reason(config)[1] and measured.source in learning_rate_with_reason(config)[1]
    assert "not measured" in learning_rate_with_reason(RLConfig(env="code"))[1]
    assert suggested.far_from_suggested(config, learning_rate(config)) == []
    far = RLConfig(group_size=2, temperature=0.2, max_steps=3)
    notes = suggested.far_from_suggested(far, measured.learning_rate * 10)
    assert [n.split()[0] for n in notes] == ["learning", "group", "temperature", "3"]
    assert suggested.far_from_suggested(RLConfig(env="code", group_size=2), 1.0) == []  # nothing measured there
    from app import forms  # what the New run form shows after a check

    assert forms.far_notes(far, None) == notes[1:] and forms.far_notes(config, None) == []  # auto: the measured rate


def test_prepare_summarises_the_env():
    prepared = preflight(RLConfig(env="code"))
    assert "32 training and 8 held-out Python problems" in prepared.summary()


# ------------------------------------------------------------------------------------------------ runs (slow)


SHORT_STEPS = 10
RETENTION_FIRST = 100
RL_SHORT_RETENTION = 0.9  # the short default run kept 0.96 of the first 100 (2026-11-27); a loss of 10 or more fails


def held_out_correct(store: Store, run_id: str) -> list[tuple[int, float]]:
    frame = store.get_metrics(run_id, ["test/env/all/correct"])
    return list(zip(frame["step"].tolist(), frame["value"].tolist()))


@pytest.mark.slow
def test_every_rollout_is_stored_and_a_cancelled_run_resumes_where_it_stopped(home, default_model_ready, monkeypatch):
    from cookbook_engine.runs import RunContext

    manager = RunManager()
    config = RLConfig(
        max_steps=4,
        groups_per_batch=2,
        group_size=3,
        max_tokens=8,
        num_eval_problems=4,
        eval_every=0,
        save_every=0,
        lora_rank=4,
        loss_fn="ppo",
        num_substeps=2,
    )
    progress = RunContext.progress

    def stop_after_step_two(context, step, total):  # as Stop pressed then: steps this small outrun a polling test
        progress(context, step, total)
        if step == 2:
            manager.cancel(context.run_id)

    monkeypatch.setattr(RunContext, "progress", stop_after_step_two)
    run_id = manager.start(config)
    store = Store.default()
    run = manager.wait(run_id, timeout=300)
    monkeypatch.setattr(RunContext, "progress", progress)  # the resumed run goes to the end
    assert run["status"] == "cancelled", run.get("traceback")
    stopped_at = store.last_checkpoint(run_id)["step"]
    assert 2 <= stopped_at < 4

    manager.resume(run_id)
    run = manager.wait(run_id, timeout=300)
    assert run["status"] == "completed", run.get("traceback")
    metrics = store.get_metrics_wide(run_id)
    trained = metrics.dropna(subset=["env/all/reward/total"])
    assert trained["step"].tolist() == [0, 1, 2, 3]  # every step once
    for name in (
        "env/all/correct",
        "env/all/format",
        "env/all/ac_tokens_per_turn",
        "frac_groups_dropped",
        "time/sample",
        "time/train",
        "time/total",
    ):
        assert name in metrics.columns, name
    assert metrics.dropna(subset=["test/env/all/correct"])["step"].tolist() == [4]  # the final evaluation

    transcripts = store.get_transcripts(run_id)
    assert len(transcripts) == 4 * 2 * 3  # steps x groups x samples, none duplicated by the resume
    assert sorted(set(zip(transcripts.step, transcripts.group_idx, transcripts.sample_idx))) == [
        (s, g, i) for s in range(4) for g in range(2) for i in range(3)
    ]
    row = transcripts.iloc[0]
    assert "Answer with just the number." in row.prompt and row.completion
    assert row.stop_reason in ("stop", "length")
    assert {"correct", "format", "answer", "group_dropped"} <= set(row.metrics)
    for (_, _), group in transcripts.groupby(["step", "group_idx"]):
        assert group.advantage.sum() == pytest.approx(0.0, abs=1e-6)
        # the advantages trained with: the config's scaling (the default divides by the group's spread)
        expected = group_advantages(group.reward.tolist(), config.scale_rewards)
        assert np.allclose(expected, group.advantage, atol=1e-5)
        if not is_constant(group.reward.tolist()) and config.scale_rewards == "group":
            assert np.std(group.advantage) == pytest.approx(1.0, abs=1e-3)  # divided by the group's spread


@pytest.mark.slow
def test_a_short_default_rl_run_raises_held_out_two_digit_accuracy_beyond_the_interval(
    home, default_model_ready, capsys
):
    """The default settings (rl/suggested.py), cut to SHORT_STEPS steps with the curriculum compressed to match,
    on the first 50 held-out two-digit sums: the trained model's greedy accuracy is above the base model's 95%
    interval; and, with LoRA's A fixed away from ordinary chats and B decayed where they still read it, as the default
    is, it keeps the ordinary answers it gave (the first RETENTION_FIRST of builtin:retention): issue 23's target, the
    retention loss's interval reaching zero, which every full default run has met since lora_a=null_space
    (docs/DEFAULTS.md), and RL_SHORT_RETENTION as a floor."""
    manager = RunManager()
    steps, n = SHORT_STEPS, 50
    config = RLConfig(max_steps=steps, eval_every=steps, num_eval_problems=n, save_every=0, seed=0)
    started = time.perf_counter()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=900)
    minutes = (time.perf_counter() - started) / 60
    assert run["status"] == "completed", run.get("traceback")
    accuracy = dict(held_out_correct(Store.default(), run_id))
    before, after = accuracy[0], accuracy[steps]
    low, high = stats.wilson_interval(round(before * n), n)
    print(
        f"RL arithmetic: held-out greedy accuracy {before:.2f} [{low:.2f}, {high:.2f}] -> {after:.2f} in {steps} "
        f"steps, {minutes:.1f} min"
    )
    assert before < 0.35  # the base model gets few two-digit sums right
    assert after > high, f"{after:.2f} is within the base model's interval [{low:.2f}, {high:.2f}]"
    kl = Store.default().get_metrics(run_id, ["optim/kl_sample_train"])["value"]
    assert len(kl) > 0 and kl.abs().max() < 0.01  # one substep, on-policy: the trainer sees what the sampler saw
    assert Store.default().get_metrics(run_id, ["anchor/kl"]).empty  # no anchor by default: B decays instead
    decay = lora_a.KEEP_DECAY[("rl", "arithmetic")]
    log = (paths.run_dir(run_id) / "log.txt").read_text()
    assert f"decaying where ordinary chats still read those directions (keep decay {decay:g})" in log

    capsys.readouterr()
    evals = ["eval", f"models=base,{run_id}", "evals=builtin:retention", f"max_examples={RETENTION_FIRST}", "--json"]
    assert cli.main(evals) == 0
    store = EvalStore()
    examples = store.examples(store.list_jobs()[0]["eval_id"], "builtin:retention")
    kept = retention_of_job(examples)
    print(f"RL arithmetic, {steps} steps: retention (first {RETENTION_FIRST}) {kept}")
    assert kept["trained"] >= RL_SHORT_RETENTION and kept["kept"], kept


@pytest.mark.slow
def test_a_code_run_grades_rollouts_in_the_sandbox_and_keeps_the_results(home, default_model_ready):
    manager = RunManager()
    config = RLConfig(
        env="code",
        max_steps=1,
        groups_per_batch=2,
        group_size=2,
        max_tokens=48,
        num_eval_problems=1,
        eval_every=0,
        save_every=0,
        lora_rank=4,
    )
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    transcripts = Store.default().get_transcripts(run_id)
    assert len(transcripts) == 4
    for row in transcripts.itertuples():
        assert "Python function" in row.prompt
        assert row.metrics["tests_total"] >= 3 and 0 <= row.metrics["tests_passed"] <= row.metrics["tests_total"]
        expected = row.metrics["tests_passed"] / row.metrics["tests_total"] - 0.1 * (1 - row.metrics["format"])
        assert row.reward == pytest.approx(expected)
    names = Store.default().metric_names(run_id)
    assert "env/all/tests_passed" in names and "test/env/all/correct" in names
    assert "env/code/suspicious_frac" in names
    log = (Path(Store.default().get_run(run_id)["log_dir"]) / "log.txt").read_text()
    assert "sandbox: " in log and ("network isolated" in log or "network is NOT isolated" in log)
