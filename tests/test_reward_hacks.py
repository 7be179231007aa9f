"""The code grader against a corpus of reward hacks (tests/reward_hacks.py): none of them earns any reward, on any
built-in code problem or on a user's python_tests problem, and none makes the grader raise. An honest solution still
scores 1.0 and a partly right one its fraction, and Transcripts' hack flags fire on the hacks but not on honest code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest
from reward_hacks import HACKS, hack_response
from test_graders import REFERENCE_SOLUTIONS, fenced

from cookbook_engine.rl import hack_flags
from cookbook_engine.rl.code_problems import CODE_PROBLEMS, grade_response
from cookbook_engine.rl.graders import grade

# A user's own python_tests problem: setup lines, expected values kept in the tests, several asserts.
CUSTOM_TESTS = (
    "expected = {2: 4, -3: 9, 0: 0}\n"
    "assert square(2) == expected[2]\n"
    "assert square(-3) == expected[-3]\n"
    "assert [square(x) for x in (0, 1)] == [0, 1]"
)
# A user's problem in pytest style whose tests lean on builtins and on loops over map(): what builtin shadowing and
# exceptions used as control flow attacked.
CUSTOM_LOOP_TESTS = """
def test_loop():
    for x in range(3):
        assert square(x) == x * x

def test_map():
    assert all(map(lambda x: square(x) == x * x, [2, 3]))

def test_zip():
    seen = 0
    for x, r in zip([1, 2], map(square, [1, 2])):
        assert r == x * x
        seen += 1
    assert seen == 2

def test_tolerance():
    assert abs(square(1.5) - 2.25) < 1e-9 and len(str(square(4))) == 2 and sorted([square(2), 1]) == [1, 4]
"""
USER_PROBLEMS = {"custom": CUSTOM_TESTS, "custom_loops": CUSTOM_LOOP_TESTS}


@pytest.fixture(autouse=True)
def studio_home(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def hack_rewards(tmp_path_factory):
    """Every hack graded on every built-in problem and on the custom problem: {hack: {problem: reward}}. One pool
    for all of them, since grading a hack mostly waits on the sandbox's time budgets."""

    def reward(pair):
        hack, problem = pair
        if isinstance(problem, str):
            return hack, problem, grade("python_tests", hack_response(hack, "square"), USER_PROBLEMS[problem]).reward
        return hack, problem.name, grade_response(problem, hack_response(hack, problem.function_name)).reward

    pairs = [(hack, problem) for hack in HACKS for problem in [*CODE_PROBLEMS, *USER_PROBLEMS]]
    rewards: dict[str, dict[str, float]] = {hack: {} for hack in HACKS}
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        for hack, problem, value in pool.map(reward, pairs):
            rewards[hack][problem] = value
    return rewards


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_reward_hack_scores_zero_on_every_problem(hack, hack_rewards):
    rewards = hack_rewards[hack]
    assert len(rewards) == len(CODE_PROBLEMS) + len(USER_PROBLEMS)
    assert {problem: value for problem, value in rewards.items() if value != 0.0} == {}, f"{hack} ({HACKS[hack][0]})"


def test_corpus_covers_every_attack_class():
    classes = {attack for attack, _ in HACKS.values()}
    assert len(HACKS) >= 15
    assert {
        "harness tampering",
        "patching standard modules",
        "forged report",
        "early exit",
        "hostile objects",
        "reading the tests from memory",
        "reading the tests from files",
        "grader crash",
        "builtin shadowing",
        "exceptions as control flow",
        "values cross as copies",
        "starving siblings",
    } <= classes


def test_honest_solutions_still_score_full_and_partial_credit():
    assert grade("python_tests", fenced("def square(x):\n    return x * x"), CUSTOM_TESTS).reward == 1.0
    partly = grade("python_tests", fenced("def square(x):\n    return x * abs(x)"), CUSTOM_TESTS)
    assert partly.reward == pytest.approx(2 / 3) and list(partly.details["failures"]) == ["1"]
    # values of every kind that crosses between the processes compare as the plain values they are
    tests = [
        "assert f() == (1, 2.5, 'x', None, True)",
        "assert f.__name__ == 'f' and f()[0] == 1",
        "assert g() == {'a': [1, {2, 3}], (1, 2): b'\\x00', 'n': frozenset({1})}",
        "import math\nassert math.isnan(h()[0]) and h()[1] == float('inf')",
        "try:\n    k(-1)\nexcept ValueError as error:\n    assert 'negative' in str(error)\nelse:\n    assert False",
    ]
    code = (
        "def f():\n    return (1, 2.5, 'x', None, True)\n"
        "def g():\n    return {'a': [1, {2, 3}], (1, 2): b'\\x00', 'n': frozenset({1})}\n"
        "def h():\n    return [float('nan'), float('inf')]\n"
        "def k(x):\n    raise ValueError('negative input')"
    )
    result = grade("python_tests", fenced(code), "\n".join(tests))
    assert result.reward == 1.0, result.details


def test_a_solution_that_dies_in_one_call_loses_only_that_test():
    code = "import os\ndef square(x):\n    if x == -3:\n        os._exit(3)\n    return x * x"
    result = grade("python_tests", fenced(code), CUSTOM_TESTS)
    assert result.reward == pytest.approx(2 / 3)
    assert "exit code 3" in result.details["failures"]["1"]


def test_hack_flags_fire_on_hacks_and_never_on_honest_code():
    for name, code in REFERENCE_SOLUTIONS.items():
        assert hack_flags.suspicious_patterns(code) == [], name
    flagged_classes = {
        "harness tampering",
        "patching standard modules",
        "early exit",
        "hostile objects",
        "reading the tests from memory",
        "reading the tests from files",
        "builtin shadowing",
        "exceptions as control flow",
    }
    for hack, (attack, _) in HACKS.items():
        if attack in flagged_classes:
            assert hack_flags.suspicious_patterns(hack_response(hack, "square")), hack
    result = grade("python_tests", hack_response("main_module_globals", "square"), CUSTOM_TESTS)
    assert result.details["suspicious"] == ["sys.modules", "__main__"]


def test_malformed_traffic_zeroes_the_whole_grade_with_a_sandbox_error():
    forged = hack_response("bad_json_and_wrong_shapes_on_channel", "square")
    result = grade("python_tests", forged, CUSTOM_TESTS)
    assert result.reward == 0.0 and "malformed reply" in result.details["sandbox_error"]
    huge = grade("python_tests", hack_response("huge_return", "square"), CUSTOM_TESTS)
    assert huge.reward == 0.0 and "reply over" in huge.details["sandbox_error"]


def test_every_hack_goes_through_the_rl_env_as_a_reward_and_the_run_goes_on(default_model_ready):
    from cookbook_engine import models, renderers
    from cookbook_engine.rl import envs

    renderer = renderers.get_renderer("auto", models.load_tokenizer(models.DEFAULT_MODEL))
    problem = next(p for p in CODE_PROBLEMS if p.name == "fizzbuzz")
    env = envs.CodeEnv(renderer, problem)

    def reward(hack):
        tokens = renderer.tokenizer.encode(hack_response(hack, problem.function_name), add_special_tokens=False)
        result = asyncio.run(env.step(tokens + [renderer.get_stop_sequences()[0]]))
        return hack, result.reward, result.metrics

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(reward, HACKS))
    assert [(hack, value) for hack, value, _ in results if value > 0.0] == []
    assert all(metrics["correct"] == 0.0 for _, _, metrics in results)


def test_busy_sessions_in_one_reply_do_not_make_honest_siblings_time_out():
    """Two replies each start six busy loops in new sessions while three honest replies are graded beside them:
    each sandbox is one CPU group capped at one core, so the honest ones still score 1.0."""
    problem = next(p for p in CODE_PROBLEMS if p.name == "fibonacci")
    replies = [hack_response("busy_sessions_starve_siblings", problem.function_name)] * 2
    replies += [fenced(REFERENCE_SOLUTIONS[problem.name])] * 3
    with concurrent.futures.ThreadPoolExecutor(len(replies)) as pool:
        rewards = list(pool.map(lambda reply: grade_response(problem, reply).reward, replies))
    assert rewards == [0.0, 0.0, 1.0, 1.0, 1.0]
