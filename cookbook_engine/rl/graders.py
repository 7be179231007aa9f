"""Graders: turn a model's response and a reference answer into a reward, for the no-code custom RL environment.

A user's dataset file holds prompts with reference answers and names one grader:

- `exact`, `numeric`, `contains`, `regex`: text graders, each reading one committed answer from the reply by the rule
  rl/text_graders.py states (a hedge such as "41 or 42 or 43" scores 0 and is marked `hedged`).
- `python_tests`: the answer is Python test code (asserts). The response's first ```python block is graded by
  rl/code_grading.py: the solution and the tests run in two separate sandboxes and the tests call the solution's
  functions through this process, so the solution can never reach the tests; the reward is the fraction passed.

What it is not: the dataset loader (it calls `validate_answer` on every row) or the RL environment (which
turns a Grade into a reward and the env/all/correct, env/all/format metrics).

How python_tests counts tests (rl/code_grading.py, `plan_tests`): top-level asserts (statements grouped up to
each assert), pytest-style `def test_*():` functions, unittest.TestCase methods and `def check(candidate)` (with
`check(f)` or `entry_point = "f"`) are each one test; `if __name__ == "__main__":` blocks count as top-level code.
A test passes only if it reached an assertion and called the solution; tests that reach none give reward 0 and a
`grading_error`. The dataset check refuses test code with no test, no assertion, no call to the solution, pytest
fixtures, or imports outside the standard library. The tests never share a process with the solution (see
rl/code_grading.py for what crosses: plain values, in-place mutation of list/dict/set arguments, identity of a
returned argument, generators item by item, printed output).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from cookbook_engine.rl import hack_flags, text_graders
from cookbook_engine.rl.code_grading import TestPlan, plan_tests, run_code_tests, snippet_plan
from cookbook_engine.rl.text_graders import (
    Grade as Grade,  # re-exported: every grader returns one
    grade_contains,
    grade_exact,
    grade_numeric,
    grade_regex,
)
from cookbook_engine.sandbox import SandboxLimits

_CODE_BLOCK = re.compile(r"```[ \t]*(?P<lang>[A-Za-z0-9_+-]*)[^\n]*\n(?P<code>.*?)```", re.DOTALL)


def extract_code_block(text: str) -> str | None:
    """The first ```python (or ```py / ```python3) fenced block; failing that, the first bare ``` block."""
    bare = None
    for match in _CODE_BLOCK.finditer(text):
        lang = match.group("lang").lower()
        if lang in ("python", "py", "python3"):
            return match.group("code")
        if lang == "" and bare is None:
            bare = match.group("code")
    return bare


# ---------------------------------------------------------------- python tests


def grade_python_tests(response: str, answer: str) -> Grade:
    return grade_code_response(response, plan_tests(answer))


def grade_code_response(response: str, tests: list[str] | TestPlan) -> Grade:
    """Extract the response's code block and run it with `tests`; no code block -> reward 0, format_ok False."""
    plan = tests if isinstance(tests, TestPlan) else snippet_plan(tests)
    code = extract_code_block(response)
    if code is None:
        return Grade(
            0.0,
            False,
            {
                "tests_passed": 0,
                "tests_total": plan.total,
                "format_ok": False,
                "error": "no ```python code block in the response",
            },
        )
    grade = run_unit_tests(code, plan)
    grade.details["format_ok"] = True
    return grade


def run_unit_tests(code: str, tests: list[str] | TestPlan, *, limits: SandboxLimits | None = None) -> Grade:
    """Run the tests (a TestPlan, or Python snippets each one test, e.g. an assert) against `code` with the trusted
    two-process grader (rl/code_grading.py); reward = passed/total. Anything the code does gives a Grade, never an
    exception. Tests that reach no assertion on a call to the solution give reward 0 and a `grading_error`."""
    if not isinstance(code, str):
        raise TypeError(f"run_unit_tests: code must be a str, got {type(code).__name__}")
    if not isinstance(tests, TestPlan) and (not tests or not all(isinstance(test, str) for test in tests)):
        raise ValueError("run_unit_tests: tests must be a TestPlan or a non-empty list of str")
    plan = tests if isinstance(tests, TestPlan) else snippet_plan(tests)
    limits = limits if limits is not None else SandboxLimits(timeout_s=10.0, cpu_s=10)
    verdict = run_code_tests(code, plan, limits)
    total = plan.total
    details: dict = {
        "tests_total": total,
        "network_isolated": verdict.network_isolated,
        "suspicious": hack_flags.suspicious_patterns(code) + verdict.runtime_flags,
    }
    if verdict.printed:
        details["printed"] = verdict.printed
    if verdict.solution_error:
        details["solution_error"] = verdict.solution_error
    if verdict.results is None:
        details.update(tests_passed=0, sandbox_error=verdict.sandbox_error, stderr=verdict.stderr)
        return Grade(0.0, False, details)
    failures = {str(index): message for index, message in enumerate(verdict.results) if message is not None}
    if verdict.grading_error:
        details.update(tests_passed=0, failures=failures, grading_error=verdict.grading_error)
        return Grade(0.0, False, details)
    passed = total - len(failures)
    details.update(tests_passed=passed, failures=failures)
    return Grade(passed / total, passed == total, details)


# ---------------------------------------------------------------- registry

GRADERS: dict[str, Callable[..., Grade]] = {
    "exact": grade_exact,
    "numeric": grade_numeric,
    "contains": grade_contains,
    "regex": grade_regex,
    "python_tests": grade_python_tests,
}


def _check_grader(grader: str) -> Callable[..., Grade]:
    if grader not in GRADERS:
        raise ValueError(f"unknown grader {grader!r}; choose one of: {', '.join(GRADERS)}")
    return GRADERS[grader]


def grade(
    grader: str,
    response: str,
    answer: str,
    *,
    tolerance: float | None = None,
    other_answers: Iterable[str] = (),
) -> Grade:
    """Grade one response with the named grader. Unknown grader or malformed answer -> ValueError. `tolerance`: the
    numeric grader's relative tolerance for float answers; `other_answers`: the other rows' answers, which a
    `contains` reply must not also hold (text_graders.py)."""
    function = _check_grader(grader)
    if not isinstance(response, str) or not isinstance(answer, str):
        raise TypeError("grade: response and answer must be str")
    if grader == "numeric":
        return function(response, answer, tolerance=tolerance)
    if grader == "contains":
        return function(response, answer, other_answers=other_answers)
    return function(response, answer)


def validate_answer(grader: str, answer: str) -> None:
    """Check that `answer` is usable with `grader` (called by the dataset loader on every row); ValueError if not."""
    _check_grader(grader)
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError(f"{grader} grader: the answer must be a non-empty string, got {answer!r}")
    if grader == "python_tests":
        plan_tests(answer)
    else:
        text_graders.validate_text_answer(grader, answer)
