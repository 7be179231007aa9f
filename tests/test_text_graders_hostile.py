"""Text graders demand one committed answer (issue 21): every hedge or misreading an RL policy could exploit scores 0
(and a hedge is flagged), beside an honest control that still scores 1. Attack classes: hedging with several
candidates (numeric, contains, regex, the arithmetic env), the last number winning, relative tolerance on large
integers, numbers glued to words ("x42y") or read through a range ("3-5" as -5), digits of other scripts,
substring matches ("4" in "14"), a list of every number or every answer, and catastrophic regexes. Fast: no model.
"""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from app import transcripts_view
from cookbook_engine.config import RLConfig
from cookbook_engine.data import loading as datasets
from cookbook_engine.rl import envs, metrics
from cookbook_engine.rl.arithmetic import ArithmeticProblem
from cookbook_engine.rl.graders import grade, validate_answer
from cookbook_engine.rl.types import Rollout, RolloutGroup


def score(grader: str, reply: str, answer: str, **options) -> float:
    return grade(grader, reply, answer, **options).reward


# --- numeric ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("right", ["41", "42", "43"])
def test_a_hedge_over_several_numbers_scores_zero_and_is_flagged_wherever_the_right_one_sits(right):
    for hedge in ("41 or 42 or 43", "41, 42, 43", "x = 41 or x = 42 or x = 43", "Answer: 41. Answer: 42. Answer: 43"):
        graded = grade("numeric", hedge, right)
        assert graded.reward == 0.0 and graded.details["hedged"], (hedge, right, graded.details)
    assert score("numeric", right, right) == 1.0  # control: committing to the right number scores
    assert score("numeric", f"The answer is {right}.", right) == 1.0


def test_the_last_number_does_not_win_an_answer_followed_by_another_number_scores_zero():
    assert score("numeric", "Answer: 41 or maybe 43", "43") == 0.0
    assert score("numeric", "Answer: 42. Not 43.", "43") == 0.0
    assert score("numeric", "Answer: 42. Not 43.", "42") == 0.0  # an answer must end the reply's numbers
    # controls: working before the answer statement is fine, and so is one result after "=" or "is"
    assert score("numeric", "12 * 2 = 24, 24 + 1 = 25. Answer: 25", "25") == 1.0
    assert score("numeric", "47 + 38 = 85", "85") == 1.0
    assert score("numeric", "The sum of 47 and 38 is 85.", "85") == 1.0
    assert score("numeric", "Final answer: **85**", "85") == 1.0


@pytest.mark.parametrize(("reply", "answer"), [("1000001", "1000000"), ("100000000000000000001", str(10**20))])
def test_integers_are_compared_exactly_at_any_size(reply, answer):
    assert score("numeric", reply, answer) == 0.0
    assert score("numeric", answer, answer) == 1.0  # control


def test_tolerance_is_for_float_answers_and_a_row_setting():
    assert score("numeric", "3.1400001", "3.14") == 1.0  # default relative 1e-6
    assert score("numeric", "3.15", "3.14") == 0.0
    assert score("numeric", "3.15", "3.14", tolerance=0.01) == 1.0
    assert score("numeric", "43", "42", tolerance=0.1) == 0.0  # never for an integer answer


def test_the_tolerance_column_is_checked_when_the_dataset_loads(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"prompt": "pi?", "answer": "3.14", "grader": "numeric", "tolerance": 0.01}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    train, _ = datasets.load_rl_problems(str(path), test_fraction=0)
    assert train[0].tolerance == 0.01
    path.write_text(json.dumps({"prompt": "six?", "answer": "6", "grader": "numeric", "tolerance": 0.1}))
    with pytest.raises(datasets.DatasetError, match=r"line 1: .*integer, compared exactly.*6\.0"):
        datasets.load_rl_problems(str(path), test_fraction=0)


@pytest.mark.parametrize(("reply", "wrongly"), [("x42y", "42"), ("3-5", "-5"), ("5km", "5"), ("v3.14.15", "3.14")])
def test_numbers_glued_to_words_or_read_through_a_range_are_not_numbers(reply, wrongly):
    assert score("numeric", reply, wrongly) == 0.0
    assert score("numeric", "x = -5", "-5") == 1.0  # controls: a sign after a space, a number beside punctuation
    assert score("numeric", "It is $42.", "42") == 1.0
    assert score("numeric", "x = \u22125", "-5") == 1.0  # U+2212 is a minus sign


@pytest.mark.parametrize("digits", ["٤٢", "４２", "৪২"])
def test_digits_of_other_scripts_are_never_read_and_refused_in_answers(digits):
    assert score("numeric", digits, "42") == 0.0
    assert score("numeric", f"Answer: 42 ({digits})", "42") == 0.0  # cannot smuggle an unseen candidate
    assert score("contains", f"{digits} 42", "42") == 0.0
    with pytest.raises(ValueError, match="outside 0-9"):
        validate_answer("numeric", digits)
    assert score("numeric", "42", "42") == 1.0  # control


def test_scientific_notation_is_read_as_a_number_up_to_three_exponent_digits():
    assert score("numeric", "Answer: 1.5e3", "1500") == 1.0
    assert score("numeric", "Answer: 2E-2", "0.02") == 1.0
    assert grade("numeric", "1e1000", "1").details["found"] is None  # not a number: a four-digit exponent
    with pytest.raises(ValueError, match="not a number"):
        validate_answer("numeric", "nan")


# --- contains --------------------------------------------------------------------------------------------------
def test_contains_matches_whole_words_and_numbers_not_substrings():
    assert score("contains", "14", "4") == 0.0
    assert score("contains", "the 4th", "4") == 0.0
    assert score("contains", "Parisian", "Paris") == 0.0
    assert score("contains", "The answer is 4.", "4") == 1.0  # controls
    assert score("contains", "It is PARIS.", "paris") == 1.0
    assert score("contains", "1,000 people", "1000") == 1.0


def test_a_list_of_every_number_scores_zero_and_is_flagged():
    reply = " ".join(str(n) for n in range(100))
    graded = grade("contains", reply, "42")
    assert graded.reward == 0.0 and graded.details["hedged"]


def test_a_list_of_every_answer_of_the_dataset_scores_zero_and_is_flagged():
    others = ["London", "Berlin", "Rome", "New York"]
    graded = grade("contains", "Paris, London, Berlin or Rome", "Paris", other_answers=others)
    assert graded.reward == 0.0 and graded.details["hedged"]
    # controls: the capital named alone scores; another answer's word inside the right answer is no rival
    assert score("contains", "The capital of France is Paris.", "Paris", other_answers=others) == 1.0
    assert score("contains", "It is New York City.", "New York City", other_answers=["York", "Rome"]) == 1.0


# --- regex -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"(a*)*b", r"^(\w+\s?)*$"])
def test_catastrophic_patterns_run_in_linear_time(pattern):
    start = time.perf_counter()
    assert score("regex", "a" * 100_000 + "!", pattern) == 0.0
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)a", r"(?<!b)a", r"a{1000}{1000}"])
def test_patterns_re2_cannot_run_in_linear_time_are_refused_at_the_dataset_check_naming_the_row(tmp_path, pattern):
    path = tmp_path / "rows.jsonl"
    rows = [
        {"prompt": "hi", "answer": "hello", "grader": "regex"},
        {"prompt": "x", "answer": pattern, "grader": "regex"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(datasets.DatasetError, match=r"line 2: .*RE2"):
        datasets.load_rl_problems(str(path), test_fraction=0)


def test_regex_matches_the_whole_reply_so_a_hedge_does_not_match():
    assert score("regex", "Answer: 41 Answer: 42", r"Answer:\s*42") == 0.0
    assert score("regex", "Answer: 42", r"Answer:\s*42") == 1.0  # control


# --- flags: the metric, the env, the Transcripts badge ---------------------------------------------------------
class _Renderer:
    def parse_response(self, action):
        return {"content": action}, True


def test_the_arithmetic_env_grades_the_committed_number_and_flags_hedges():
    env = envs.ArithmeticEnv(_Renderer(), ArithmeticProblem(47, "+", 38))
    hedge, honest = env.grade("84 or 85 or 86"), env.grade("47 + 38 = 85")
    assert hedge.score == 0.0 and hedge.metrics[metrics.HEDGED_METRIC] == 1.0
    assert honest.score == 1.0 and honest.metrics[metrics.HEDGED_METRIC] == 0.0 and honest.format_ok
    assert not env.grade("I do not know").format_ok


def test_partial_credit_pays_digits_in_place_never_a_hedge_and_never_reaches_a_right_answer():
    """RL's default partial credit (a wrong answer's digits in place, rl/arithmetic.digit_credit) as attack surface:
    every wrong number scores below the right one, a hedge or a list of numbers scores 0 as before, writing more or
    fewer digits earns nothing, and what the studio reports as accuracy (`correct`, every eval set) stays right or
    wrong only."""
    partial = RLConfig().partial_credit
    assert 0 < partial < 1
    env = envs.ArithmeticEnv(_Renderer(), ArithmeticProblem(57, "+", 49), partial_credit=partial)
    right = env.grade("106")
    assert right.score == 1.0 and right.correct
    wrong = {reply: env.grade(reply) for reply in map(str, range(1000)) if reply != "106"}
    assert max(graded.score for graded in wrong.values()) == pytest.approx(partial * 2 / 3)  # two digits of three
    assert not any(graded.correct for graded in wrong.values())
    assert wrong["107"].score == pytest.approx(partial * 2 / 3) and wrong["96"].score == 0.0  # the missed carry: 0
    for attack in (
        "96 or 106",
        "106 or 107",
        "100 101 102 103 104 105 106 107 108 109",
        "1066",
        "10606",
        "0096",
        "-106",
        "106.5",
        "1 0 6",
        "106106",
        "The answer is 10 or 6.",
    ):
        graded = env.grade(attack)
        assert graded.score == 0.0 and not graded.correct, attack
    assert envs.ArithmeticEnv(_Renderer(), ArithmeticProblem(57, "+", 49)).grade("107").score == 0.0  # off: 0
    # what is reported stays exact: the eval sets grade right or wrong, whatever the env's partial credit
    assert grade("numeric", "107", "106").reward == 0.0


def _rollout(flag: float) -> Rollout:
    return Rollout([1], [2], [0.0], "stop", 0.0, {metrics.HEDGED_METRIC: flag, "correct": 0.0}, {})


def test_hedged_frac_is_logged_per_step_under_env_text():
    logged = metrics.rollout_metrics([RolloutGroup([_rollout(1.0), _rollout(0.0), _rollout(0.0), _rollout(1.0)], [])])
    assert logged[metrics.HEDGED_FRAC] == 0.5
    assert "env/all/hedged" not in logged


def test_transcripts_badge_a_hedged_reply_and_not_an_honest_one():
    row = pd.Series({"reward": 0.0, "advantage": -0.5, "metrics": {"hedged": True, "candidates": [41.0, 42.0]}})
    assert transcripts_view.hack_flags(row["metrics"]) == [transcripts_view.HEDGED_FLAG]
    assert "possible reward hack" in transcripts_view.sample_badges(row)
    honest = pd.Series({"reward": 1.0, "advantage": 0.5, "metrics": {"hedged": False, "found": 42.0}})
    assert "possible reward hack" not in transcripts_view.sample_badges(honest)
