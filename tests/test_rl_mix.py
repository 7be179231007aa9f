"""RL over a mix of envs (`env=arithmetic:2,code:1`): the syntax and its refusals (one message, before a run
exists), each step's groups split by weight, every group tagged with its env so env/<name>/... is logged per env,
and Transcripts' Task filter. The real-model run is tests/test_rl_mix_model.py (slow)."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from app import transcripts_view as view
from cookbook_engine.config import RLConfig, validate
from cookbook_engine.data import mix
from cookbook_engine.rl import envs
from cookbook_engine.rl.metrics import rollout_metrics
from cookbook_engine.rl.types import Rollout, RolloutGroup


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("arithmatic:1,code:1", "env=arithmatic:1,code:1: unknown env arithmatic; choose from arithmetic, code"),
        ("arithmetic:-1,code:1", "arithmetic has weight -1; a weight is a number 0 or more"),
        ("arithmetic:0,code:0", "the weights sum to 0; give at least one env a positive weight"),
        ("arithmetic:1,,code:1", "an empty entry between commas; write env=arithmetic:2,code:1"),
        ("arithmetic:1,arithmetic:2", "arithmetic named twice; each env once"),
        ("arithmetic:1,custom:1", "dataset: env=custom needs a prompt/answer file"),
        ("calculus", "env=calculus: unknown env calculus"),
    ],
)
def test_bad_mixes_are_refused_with_one_message(env, message):
    problems = validate(RLConfig(env=env))
    assert len(problems) == 1 and message in problems[0], problems


def test_good_mixes_and_single_envs_pass():
    for env in ("arithmetic", "code", "arithmetic:2,code:1", "arithmetic:1,code:0"):
        assert validate(RLConfig(env=env)) == [], env
    assert validate(RLConfig(env="arithmetic:1,custom:3", dataset="x.jsonl")) == []


def test_a_refused_mix_starts_no_run(home):
    from cookbook_engine.config import ConfigError
    from cookbook_engine.runs import RunManager
    from storage import Store

    with pytest.raises(ConfigError, match="weights sum to 0"):
        RunManager().start(RLConfig(env="arithmetic:0,code:0"))
    assert Store.default().list_runs() == []


def test_step_counts_split_each_step_by_weight():
    parts = mix.parse_mix("arithmetic:1,code:1", "env")
    assert all(mix.step_counts(parts, 2, random.Random(i)) == [1, 1] for i in range(20))
    parts = mix.parse_mix("a:3,b:1,c:0", "env")
    totals = [0, 0, 0]
    for i in range(400):
        counts = mix.step_counts(parts, 2, random.Random(i))
        assert sum(counts) == 2 and counts[0] >= 1 and counts[2] == 0
        totals = [t + c for t, c in zip(totals, counts)]
    assert 0.70 < totals[0] / 800 < 0.80  # 3:1 holds on average over the steps


def _question(builder) -> tuple[str, str]:
    return builder.task, builder.inner.make_env().question


def test_a_mix_builds_each_env_and_tags_its_groups():
    setup = envs.build_env(RLConfig(env="arithmetic:2,code:1", groups_per_batch=3, num_eval_problems=2), None)
    assert setup.tasks == ("arithmetic", "code")
    for step in range(5):
        batch = setup.train.get_batch(step)
        assert [builder.task for builder in batch].count("arithmetic") == 2 and len(batch) == 3
        again = setup.train.get_batch(step)  # deterministic, so a resumed run sees the same groups
        assert [_question(b) for b in batch] == [_question(b) for b in again]
    arithmetic = next(b for b in setup.train.get_batch(0) if b.task == "arithmetic")
    assert arithmetic.logging_tags()[0] == "arithmetic" and arithmetic.logging_tags()[1].startswith("arithmetic/")
    assert sorted(b.task for b in setup.test) == ["arithmetic"] * 2 + ["code"] * 2  # each env's held-out problems
    assert "a mix of envs" in setup.description and "code (weight 1)" in setup.description


def _group(task: str | None, rewards: list[float]) -> RolloutGroup:
    rollouts = [Rollout([1], [2], [-0.1], "stop", r, {"correct": r}, {}) for r in rewards]
    return RolloutGroup(rollouts, [task] if task else [], task)


def test_each_env_of_a_mix_gets_its_own_metrics_even_alone_in_a_step():
    metrics = rollout_metrics([_group("arithmetic", [1.0, 1.0]), _group("code", [0.0, 1.0])])
    assert metrics["env/arithmetic/correct"] == 1.0 and metrics["env/code/correct"] == 0.5
    assert metrics["env/arithmetic/reward/total"] == 1.0 and metrics["env/all/correct"] == 0.75
    alone = rollout_metrics([_group("code", [0.0, 1.0])])
    assert alone["env/code/correct"] == 0.5  # a step that drew only code still logs env/code/...
    assert not any(key.startswith("env/arithmetic") for key in rollout_metrics([_group(None, [1.0])]))


def test_transcripts_filter_a_mix_by_task():
    run = {"kind": "rl", "config": {"env": "arithmetic:2,code:1"}}
    assert view.run_tasks(run) == ["arithmetic", "code"]
    assert view.run_tasks({"kind": "rl", "config": {"env": "code"}}) == []
    rows = pd.DataFrame({"metrics": [{"task": "arithmetic"}, {"task": "code"}, {"task": "code"}], "reward": [1, 0, 1]})
    assert view.of_task(rows, "code")["reward"].tolist() == [0, 1]
    assert len(view.of_task(rows, view.ALL_TASKS)) == 3


def test_the_new_run_form_takes_a_list_of_envs_and_checks_it(home, default_model_ready, monkeypatch):
    monkeypatch.setenv("COOKBOOK_MEMORY_CHECK", "off")  # the form's check, not this busy machine's free memory
    from tests.test_studio_apptest import by_label, click, open_page, shown_text

    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()
    by_label(at.get("button_group"), "Environment").set_value("Mix").run()
    click(at, "Check settings")
    text = shown_text(at)
    assert "a mix of envs: arithmetic (weight 1" in text and "code (weight 1" in text, text
    assert any("env=arithmetic:1,code:1" in code.value for code in at.code)
