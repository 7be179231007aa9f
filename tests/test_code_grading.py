"""What the code grader accepts from a user's python_tests (rl/code_grading.py): every test convention is found and
run, tests that prove nothing are refused or score 0, the tests' own names are never the solution's, and honest
code that mutates, returns its argument, yields or prints scores as it would in one process. Each attack has an
honest control beside it."""

from __future__ import annotations

import concurrent.futures

import pytest
from reward_hacks import hack_response
from test_graders import fenced

from cookbook_engine.data import loading
from cookbook_engine.rl.code_grading import plan_tests
from cookbook_engine.rl.graders import grade, validate_answer

SQUARE = fenced("def square(x):\n    return x * x")
PARTLY = fenced("def square(x):\n    return x * abs(x)")  # wrong for negative numbers
NOTHING = fenced("pass")

CONVENTIONS = {
    "pytest": (
        "def test_positive():\n    assert square(3) == 9\n\n"
        "def test_negative():\n    assert square(-2) == 4\n\n"
        "def test_zero():\n    assert square(0) == 0\n"
    ),
    "check": (
        "METADATA = {'author': 'me'}\n\n"
        "def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n\n"
        "check(square)\n"
    ),
    "check_entry_point": "entry_point = 'square'\n\ndef check(candidate):\n    assert candidate(-2) == 4\n",
    "unittest_without_main": (
        "import unittest\n\n"
        "class TestSquare(unittest.TestCase):\n"
        "    def test_positive(self):\n        self.assertEqual(square(3), 9)\n\n"
        "    def test_negative(self):\n        self.assertEqual(square(-2), 4)\n\n"
        "    def test_float(self):\n        self.assertAlmostEqual(square(1.5), 2.25)\n"
    ),
    "main_guard": (
        "def run():\n    assert square(3) == 9\n    assert square(-2) == 4\n\n"
        'if __name__ == "__main__":\n    run()\n    assert square(0) == 0\n'
    ),
    "unittest_main_guard": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_negative(self):\n"
        "        self.assertEqual(square(-2), 4)\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    ),
}


@pytest.fixture(autouse=True)
def studio_home(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))


def assert_full_credit(reply: str, tests: str) -> None:
    result = grade("python_tests", reply, tests)
    assert result.reward == 1.0, result.details


def grade_all(pairs: list[tuple[str, str]]) -> list:
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        return list(pool.map(lambda pair: grade("python_tests", pair[0], pair[1]), pairs))


@pytest.mark.parametrize("convention", sorted(CONVENTIONS))
def test_every_test_convention_is_run_pass_scores_zero_and_honest_code_full(convention):
    tests = CONVENTIONS[convention]
    honest, nothing, partly = grade_all([(SQUARE, tests), (NOTHING, tests), (PARTLY, tests)])
    assert honest.reward == 1.0, honest.details
    assert nothing.reward == 0.0, nothing.details  # used to be 1.0: the tests never ran
    total = plan_tests(tests).total
    negative_tests = {"pytest": 1, "unittest_without_main": 1, "main_guard": 1, "unittest_main_guard": 1}
    expected = 0.0 if convention.startswith("check") else (total - negative_tests[convention]) / total
    assert partly.reward == pytest.approx(expected), partly.details


def test_tests_that_prove_nothing_are_refused_at_the_dataset_check_with_the_problem_named(tmp_path):
    refused = {
        "def test_a():\n    square(2)\n": "executes no assertion",
        "x = 1\n": "defines no test",
        "def check(candidate):\n    assert candidate(1) == 1\n": "needs its entry point",
        "def test_a(tmp_path):\n    assert square(2) == 4\n": "pytest fixtures",
        "import numpy\nassert square(2) == 4\n": "does not have",
        "assert sorted([2, 1]) == [1, 2]\n": "call no function of the solution",
    }
    for tests, message in refused.items():
        with pytest.raises(ValueError, match=message):
            validate_answer("python_tests", tests)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"prompt": "Write square(x)", "answer": "assert square(2) == 4", "grader": "python_tests"}\n'
        '{"prompt": "Write cube(x)", "answer": "def test_a():\\n    cube(2)", "grader": "python_tests"}\n'
    )
    with pytest.raises(ValueError) as error:
        loading.load_rl_problems(str(rows))
    assert "line 2" in str(error.value) and "no assertion" in str(error.value), str(error.value)


def test_tests_that_reach_no_assertion_score_zero_with_a_grading_error():
    vacuous = "def test_a():\n    if square(2) == 5:\n        assert False\n"
    result = grade("python_tests", SQUARE, vacuous)
    assert result.reward == 0.0 and "no assertion on a call" in result.details["grading_error"]
    # one meaningful test is enough for the file; the vacuous one alone fails
    mixed = vacuous + "\ndef test_b():\n    assert square(3) == 9\n"
    result = grade("python_tests", SQUARE, mixed)
    assert result.reward == 0.5 and "without executing an assertion" in result.details["failures"]["0"]


def test_the_tests_names_are_their_own_only_entry_points_are_stubbed():
    assert plan_tests(CONVENTIONS["pytest"]).entry_points == ("square",)
    assert plan_tests(
        "from math import sqrt\ndef helper(x):\n    return x\nassert helper(sqrt(f(4))) == 2"
    ).entry_points == ("f",)
    shadow = hack_response("shadow_builtins", "square")
    tests = "def test_loop():\n    for x in range(3):\n        assert square(x) == x * x\n"
    hack, honest = grade_all([(shadow, tests), (SQUARE, tests)])
    assert (hack.reward, honest.reward) == (0.0, 1.0), (hack.details, honest.details)
    assert "builtin shadowing" in hack.details["suspicious"]


def test_solution_exceptions_arrive_as_one_plain_type_never_as_control_flow():
    stop = hack_response("stop_iteration_ends_the_loops", "square")
    tests = "assert all(map(square, [1, 2]))\nfor r in map(square, [3]):\n    assert r == 9\n"
    result = grade("python_tests", stop, tests)
    assert result.reward == 0.0 and "exceptions as control flow" in result.details["suspicious"]
    assert "SolutionError: StopIteration" in result.details["failures"]["0"], result.details
    # ordinary error types still match `except ValueError` and assertRaises, with the solution's message
    raises = fenced("def root(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x ** 0.5")
    tests = (
        "import unittest\nclass T(unittest.TestCase):\n    def test_raises(self):\n"
        "        with self.assertRaises(ValueError) as caught:\n            root(-1)\n"
        "        self.assertIn('negative', str(caught.exception))\n"
        "def test_plain():\n    try:\n        root(-4)\n    except ValueError as error:\n"
        "        assert error.name == 'ValueError' and error.message == 'negative'\n    else:\n        assert False\n"
    )
    assert_full_credit(raises, tests)


def test_mutation_and_identity_behave_as_in_one_process():
    tests = (
        "xs = [1, 2, 3]\nr = reverse_copy(xs)\nassert r == [3, 2, 1] and r is not xs and xs == [1, 2, 3]\n"
        "ys = ['a', 'b']\nassert reverse_copy(ys) == ['b', 'a'] and ys == ['a', 'b']\n"
    )
    hack = hack_response("mutate_argument_and_return_it", "reverse_copy")
    copy = fenced("def reverse_copy(xs):\n    return xs[::-1]")
    in_place = (
        "xs = [3, 1, 2]\nassert sort_in_place(xs) is None and xs == [1, 2, 3]\n"
        "d = {'a': 1}\nr = add_key(d, 'b')\nassert r is d and d == {'a': 1, 'b': 2}\n"
    )
    honest_in_place = fenced(
        "def sort_in_place(xs):\n    xs.sort()\ndef add_key(d, k):\n    d[k] = len(d) + 1\n    return d"
    )
    results = grade_all([(hack, tests), (copy, tests), (honest_in_place, in_place)])
    assert [r.reward for r in results] == [0.0, 1.0, 1.0], [r.details for r in results]


def test_generators_and_printed_output_are_supported():
    generators = fenced(
        "def evens(n):\n    for k in range(n):\n        yield 2 * k\n"
        "def naturals():\n    k = 0\n    while True:\n        yield k\n        k += 1\n"
        "def shout(s):\n    print(s.upper())\n    return len(s)"
    )
    tests = (
        "import contextlib, io, itertools\n"
        "assert list(evens(3)) == [0, 2, 4]\n"
        "assert list(itertools.islice(naturals(), 4)) == [0, 1, 2, 3]\n"
        "g = evens(2)\nassert next(g) == 0 and next(g) == 2 and next(g, None) is None\n"
        "buffer = io.StringIO()\nwith contextlib.redirect_stdout(buffer):\n    n = shout('hi')\n"
        "assert n == 2 and buffer.getvalue() == 'HI\\n'\n"
    )
    assert_full_credit(generators, tests)


def test_the_call_cap_lets_honest_loops_through():
    tests = "def test_many():\n    for x in range(600):\n        assert square(x) == x * x\n"
    assert_full_credit(SQUARE, tests)
