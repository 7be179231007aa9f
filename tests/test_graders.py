"""Graders for custom RL environments and the built-in code problems, run through the real sandbox."""

from __future__ import annotations

import pytest

from cookbook_engine.rl.code_grading import plan_tests
from cookbook_engine.rl.code_problems import CODE_PROBLEMS, CodeProblem, grade_response, train_test_split
from cookbook_engine.rl.graders import (
    GRADERS,
    extract_code_block,
    grade,
    run_unit_tests,
    validate_answer,
)
from cookbook_engine.sandbox import SandboxLimits, sandbox_capabilities


@pytest.fixture(autouse=True)
def studio_home(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\nIt works."


# ---------------------------------------------------------------- text helpers


def test_extract_code_block_prefers_python_then_bare():
    assert extract_code_block("```python\nx = 1\n```") == "x = 1\n"
    assert extract_code_block("a\n```py\ny = 2\n```\nb") == "y = 2\n"
    assert extract_code_block("```\nbare = 3\n```") == "bare = 3\n"
    assert extract_code_block("```\nbare\n```\n```python\nreal\n```") == "real\n"
    assert extract_code_block("```js\nlet x\n```") is None
    assert extract_code_block("no code at all") is None
    assert extract_code_block("```python\nunclosed") is None


# ---------------------------------------------------------------- simple graders


def test_exact_ignores_case_and_whitespace_only():
    assert grade("exact", "  Paris\n", "paris").reward == 1.0
    assert grade("exact", "New   York", "new york").correct
    assert grade("exact", "Paris.", "Paris").reward == 0.0
    assert grade("exact", "The answer is Paris", "Paris").reward == 0.0


def test_numeric_grades_the_committed_number():
    assert grade("numeric", "7 + 5 = 12", "12").correct
    assert grade("numeric", "so the total is 1,000", "1000").correct
    assert grade("numeric", "The answer is 3.0", "3").correct  # the same value: integers compare by value, exactly
    assert not grade("numeric", "x = 3.0000000001", "3").correct  # no tolerance for an integer answer
    assert grade("numeric", "x = 3.0000001", "3.0").correct  # a float answer: relative tolerance 1e-6
    assert not grade("numeric", "12 then 13", "12").correct
    assert not grade("numeric", "7 + 5 makes 12", "12").correct  # three numbers and no "answer", "=" or "is"
    missing = grade("numeric", "I don't know", "12")
    assert missing.reward == 0.0 and missing.details["found"] is None
    assert grade("numeric", "0", "0").correct


def test_contains_is_case_insensitive_on_whole_words():
    assert grade("contains", "The capital is PARIS, France.", "paris").correct
    assert not grade("contains", "The capital is Lyon.", "paris").correct
    assert not grade("contains", "Parisian food", "paris").correct


def test_regex_matches_the_whole_reply():
    assert grade("regex", "Answer: 42", r"Answer:\s*\d+").correct
    assert grade("regex", "  Answer: 42\n", r"Answer:\s*\d+").correct  # surrounding whitespace is stripped
    assert not grade("regex", "Answer: none", r"Answer:\s*\d+").correct
    assert not grade("regex", "Answer: 42, or 41", r"Answer:\s*\d+").correct
    assert grade("regex", "Well. Answer: 42", r"(?s).*Answer:\s*\d+").correct
    assert grade("regex", "YES", r"(?i)^yes$").correct


def test_bad_answers_and_unknown_graders_give_clear_errors():
    with pytest.raises(ValueError, match=r"'\(unclosed'"):
        validate_answer("regex", "(unclosed")
    with pytest.raises(ValueError, match=r"'\[a-'"):
        grade("regex", "text", "[a-")
    with pytest.raises(ValueError, match="'twelve' is not a number"):
        validate_answer("numeric", "twelve")
    with pytest.raises(ValueError, match="line 2"):
        validate_answer("python_tests", "assert f(1) == 1\nassert f(2 ==")
    with pytest.raises(ValueError, match="non-empty"):
        validate_answer("exact", "   ")
    with pytest.raises(ValueError, match="exact, numeric, contains, regex, python_tests"):
        grade("fuzzy", "a", "a")
    for name in GRADERS:
        validate_answer(name, {"numeric": "3", "python_tests": "assert f(1) == 1", "regex": "a+"}.get(name, "x"))


# ---------------------------------------------------------------- python tests

SQUARE_TESTS = "assert square(2) == 4\nassert square(3) == 9\nassert square(-1) == 1\nassert square(0) == 0"


def test_plan_tests_groups_setup_with_the_next_assert():
    plan = plan_tests("import math\nx = 3\nassert math.sqrt(square(9)) == x\nassert x > 0\nprint('done')")
    assert plan.groups == (
        ("import math\nx = 3\nassert math.sqrt(square(9)) == x", True),
        ("assert x > 0\nprint('done')", True),
    )
    assert plan.entry_points == ("square",)
    check = plan_tests("def check(f):\n    assert f(1) == 1\ncheck(square)")
    assert (
        check.check == "square"
        and check.total == 1
        and check.groups == (("def check(f):\n    assert f(1) == 1", False),)
    )


def test_python_tests_full_credit():
    result = grade("python_tests", fenced("def square(x):\n    return x * x"), SQUARE_TESTS)
    assert result.reward == 1.0 and result.correct
    assert result.details["tests_passed"] == 4 and result.details["tests_total"] == 4
    assert result.details["format_ok"] is True


def test_python_tests_partial_credit_names_the_failures():
    wrong_for_negatives = "def square(x):\n    return x * abs(x)"
    result = grade("python_tests", fenced(wrong_for_negatives), SQUARE_TESTS)
    assert result.reward == 0.75 and not result.correct
    assert result.details["tests_passed"] == 3
    assert list(result.details["failures"]) == ["2"] and "AssertionError" in result.details["failures"]["2"]


def test_a_crashing_solution_scores_zero_and_reports_why():
    result = grade("python_tests", fenced("def square(x):\n    return x * x\nraise RuntimeError('oops')"), SQUARE_TESTS)
    # the def ran before the crash, so the tests still find square: the crash itself is reported
    assert result.details["solution_error"] == "RuntimeError: oops"
    broken = grade("python_tests", fenced("def square(x) return x"), SQUARE_TESTS)
    assert broken.reward == 0.0 and "SyntaxError" in broken.details["solution_error"]
    exits = grade("python_tests", fenced("import os\nos._exit(0)"), SQUARE_TESTS)
    assert exits.reward == 0.0 and "ended before the tests could call it" in exits.details["sandbox_error"]


def test_a_hanging_test_costs_only_its_own_credit():
    hangs_on_negative = "def square(x):\n    while x < 0:\n        pass\n    return x * x"
    result = grade("python_tests", fenced(hangs_on_negative), SQUARE_TESTS)
    assert result.reward == 0.75
    assert "timed out" in result.details["failures"]["2"]


def test_output_printed_by_the_solution_does_not_break_grading():
    flood = "def square(x):\n    print('x' * 100000)\n    return x * x"
    result = grade("python_tests", fenced(flood), SQUARE_TESTS)
    assert result.reward == 1.0
    assert len(result.details["printed"]) <= 2000


def test_no_code_block_scores_zero_with_format_flag():
    result = grade("python_tests", "def square(x): return x * x", SQUARE_TESTS)
    assert result.reward == 0.0 and result.details["format_ok"] is False


def test_run_unit_tests_uses_one_process_for_all_tests():
    tests = [
        "import os\nPIDS = [os.getpid()]\nassert f() == 1",
        "assert os.getpid() == PIDS[0] and f() == 1",
        "assert f() == 2",
    ]
    result = run_unit_tests("def f():\n    return 1", tests)
    assert result.details["tests_passed"] == 2 and result.details["tests_total"] == 3
    assert result.reward == pytest.approx(2 / 3)


def test_grading_a_sandbox_kill_scores_zero():
    result = run_unit_tests("block = bytearray(4 * 1024 ** 3)", ["assert True"])
    if sandbox_capabilities()["memory_cgroup"]:  # killed by the cgroup before it defined anything: nothing scores
        assert result.reward == 0.0 and result.details["sandbox_error"] == "memory limit"
    else:  # RLIMIT_AS makes the allocation fail; the solution server reports the error
        assert result.details["solution_error"] == "MemoryError"
    crashed = run_unit_tests("import ctypes\nctypes.string_at(0)", ["assert True"])
    assert crashed.reward == 0.0 and "(signal SIGSEGV)" in crashed.details["sandbox_error"]
    swallows_timeouts = (
        "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
    )
    hung = run_unit_tests(swallows_timeouts, ["assert True"], limits=SandboxLimits(timeout_s=1.0))
    assert hung.reward == 0.0 and hung.details["sandbox_error"] == "timeout"


# ---------------------------------------------------------------- built-in code problems

REFERENCE_SOLUTIONS = {
    "square": "def square(x):\n    return x * x",
    "add": "def add(a, b):\n    return a + b",
    "double": "def double(x):\n    return 2 * x",
    "negate": "def negate(x):\n    return -x",
    "is_even": "def is_even(n):\n    return n % 2 == 0",
    "absolute_value": "def absolute_value(x):\n    return x if x >= 0 else -x",
    "max_of_three": "def max_of_three(a, b, c):\n    return max(a, b, c)",
    "celsius_to_fahrenheit": "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32",
    "first_element": "def first_element(xs):\n    return xs[0]",
    "last_element": "def last_element(xs):\n    return xs[-1]",
    "max_of_list": "def max_of_list(xs):\n    return max(xs)",
    "min_of_list": "def min_of_list(xs):\n    return min(xs)",
    "sum_list": "def sum_list(xs):\n    return sum(xs)",
    "reverse_string": "def reverse_string(s):\n    return s[::-1]",
    "to_upper": "def to_upper(s):\n    return s.upper()",
    "average": "def average(xs):\n    return sum(xs) / len(xs)",
    "count_vowels": "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')",
    "count_uppercase": "def count_uppercase(s):\n    return sum(1 for c in s if c.isupper())",
    "factorial": "def factorial(n):\n    result = 1\n    for k in range(2, n + 1):\n        result *= k\n"
    "    return result",
    "multiply_list": "def multiply_list(xs):\n    result = 1\n    for x in xs:\n        result *= x\n    return result",
    "count_occurrences": "def count_occurrences(xs, x):\n    return xs.count(x)",
    "is_palindrome": "def is_palindrome(s):\n    return s == s[::-1]",
    "is_leap_year": "def is_leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
    "fizzbuzz": "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n"
    "        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)",
    "sum_of_digits": "def sum_of_digits(n):\n    return sum(int(d) for d in str(n))",
    "count_words": "def count_words(s):\n    return len(s.split())",
    "power": "def power(base, exponent):\n    return base ** exponent",
    "fibonacci": "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "is_prime": "def is_prime(n):\n    if n < 2:\n        return False\n"
    "    return all(n % k for k in range(2, int(n ** 0.5) + 1))",
    "gcd": "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
    "remove_duplicates": "def remove_duplicates(xs):\n    seen, out = set(), []\n    for x in xs:\n"
    "        if x not in seen:\n            seen.add(x)\n            out.append(x)\n"
    "    return out",
    "sort_list": "def sort_list(xs):\n    return sorted(xs)",
    "capitalize_words": "def capitalize_words(s):\n    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))",
    "longest_word": "def longest_word(s):\n    return max(s.split(), key=len)",
    "running_sum": "def running_sum(xs):\n    out, total = [], 0\n    for x in xs:\n        total += x\n"
    "        out.append(total)\n    return out",
    "flatten": "def flatten(lists):\n    return [x for inner in lists for x in inner]",
    "char_frequency": "def char_frequency(s):\n    counts = {}\n    for c in s:\n"
    "        counts[c] = counts.get(c, 0) + 1\n    return counts",
    "is_anagram": "def is_anagram(a, b):\n    return sorted(a) == sorted(b)",
    "second_largest": "def second_largest(xs):\n    return sorted(set(xs))[-2]",
    "merge_sorted": "def merge_sorted(a, b):\n    return sorted(a + b)",
}


def test_problem_set_shape_and_split():
    assert len(CODE_PROBLEMS) == 40
    assert len({problem.name for problem in CODE_PROBLEMS}) == 40
    for problem in CODE_PROBLEMS:
        assert isinstance(problem, CodeProblem)
        assert 3 <= len(problem.tests) <= 5
        assert f"`{problem.function_name}(" in problem.prompt and "```python" in problem.prompt
        for test in problem.tests:
            validate_answer("python_tests", test)
    train, test = train_test_split()
    assert (len(train), len(test)) == (32, 8)
    assert {p.name for p in train}.isdisjoint({p.name for p in test})
    assert train_test_split() == (train, test)  # deterministic
    assert set(REFERENCE_SOLUTIONS) == {problem.name for problem in CODE_PROBLEMS}


@pytest.mark.parametrize("problem", CODE_PROBLEMS, ids=lambda problem: problem.name)
def test_reference_solution_passes_and_a_stub_fails(problem):
    right = grade_response(problem, fenced(REFERENCE_SOLUTIONS[problem.name]))
    assert right.reward == 1.0, right.details
    stub = grade_response(problem, fenced(f"def {problem.function_name}(*args, **kwargs):\n    return None"))
    assert stub.reward < 1.0, f"{problem.name}: a function returning None passes every test"
