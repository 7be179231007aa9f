"""Graders: turn a model's response and a reference answer into a reward, for the no-code custom RL environment.

A user's dataset file holds prompts with reference answers and names one grader:

- `exact`: the response equals the answer, ignoring case and runs of whitespace.
- `numeric`: the last number in the response equals the answer (relative tolerance 1e-6).
- `contains`: the answer appears in the response, ignoring case and runs of whitespace.
- `regex`: the answer is a regular expression that must match somewhere in the response (`re.search`;
  anchor it with ^...$ to match the whole response, prefix (?i) to ignore case).
- `python_tests`: the answer is Python test code (asserts). The response's first ```python block is run with
  the tests in the sandbox (one process per response); the reward is the fraction of tests passed.

What it is not: the dataset loader (it calls `validate_answer` on every row) or the RL environment (which
turns a Grade into a reward and the env/all/correct, env/all/format metrics). Regexes run in this process
without a time limit: a pathological pattern can be slow on a long response.

How python_tests counts tests: the answer's top-level statements are split into groups, each ending at a
top-level `assert` (statements after the last assert join the last group; code with no assert is one test).
All groups run in order in one namespace after the solution, each in its own try/except with its own time
budget, so one failing or hanging test costs only its own credit. The tests run in the same process as the
solution: a solution that is determined to forge the result line (reading the harness's nonce from memory)
could do so; a small model in RL does not, and the sandbox keeps it from harming anything else.
"""

from __future__ import annotations

import ast
import json
import math
import re
import secrets
from dataclasses import dataclass, field
from typing import Callable

from cookbook_engine.sandbox import SandboxLimits, run_python


@dataclass
class Grade:
    reward: float
    correct: bool
    details: dict = field(default_factory=dict)


# ---------------------------------------------------------------- text helpers

_CODE_BLOCK = re.compile(r"```[ \t]*(?P<lang>[A-Za-z0-9_+-]*)[^\n]*\n(?P<code>.*?)```", re.DOTALL)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?")


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


def last_number(text: str) -> float | None:
    """The last number written in the text ("1,234.5", "-3", "2e5", ".5"), or None when there is none."""
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    return float(matches[-1].replace(",", ""))


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def _parse_number(answer: str) -> float:
    try:
        return float(answer.strip().replace(",", ""))
    except ValueError:
        raise ValueError(f"numeric grader: the answer {answer!r} is not a number") from None


# ---------------------------------------------------------------- the simple graders


def grade_exact(response: str, answer: str) -> Grade:
    correct = _normalise(response) == _normalise(answer)
    return Grade(float(correct), correct, {})


def grade_numeric(response: str, answer: str) -> Grade:
    expected = _parse_number(answer)
    found = last_number(response)
    correct = found is not None and math.isclose(found, expected, rel_tol=1e-6, abs_tol=1e-12)
    return Grade(float(correct), correct, {"found": found, "expected": expected})


def grade_contains(response: str, answer: str) -> Grade:
    correct = _normalise(answer) in _normalise(response)
    return Grade(float(correct), correct, {})


def grade_regex(response: str, answer: str) -> Grade:
    correct = _compile_regex(answer).search(response) is not None
    return Grade(float(correct), correct, {})


def _compile_regex(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"regex grader: the answer {pattern!r} is not a valid regular expression: {error}") from None


# ---------------------------------------------------------------- python tests


def split_tests(test_code: str) -> list[str]:
    """Split test code into tests: groups of top-level statements, each ending at a top-level assert."""
    try:
        module = ast.parse(test_code)
    except SyntaxError as error:
        raise ValueError(f"python_tests grader: the test code does not parse (line {error.lineno}: {error.msg})") \
            from None
    lines = test_code.splitlines()
    groups: list[list[ast.stmt]] = [[]]
    for statement in module.body:
        groups[-1].append(statement)
        if isinstance(statement, ast.Assert):
            groups.append([])
    if not groups[-1]:
        groups.pop()
    elif len(groups) > 1:  # statements after the last assert belong to the last test
        groups[-2].extend(groups.pop())
    tests = []
    for group in groups:
        first, last = group[0], group[-1]
        tests.append("\n".join(lines[first.lineno - 1:last.end_lineno]))
    return tests


def grade_python_tests(response: str, answer: str) -> Grade:
    return grade_code_response(response, split_tests(answer))


def grade_code_response(response: str, tests: list[str]) -> Grade:
    """Extract the response's code block and run it with `tests`; no code block -> reward 0, format_ok False."""
    code = extract_code_block(response)
    if code is None:
        return Grade(0.0, False, {"tests_passed": 0, "tests_total": len(tests), "format_ok": False,
                                  "error": "no ```python code block in the response"})
    grade = run_unit_tests(code, tests)
    grade.details["format_ok"] = True
    return grade


_HARNESS = r'''
import json, signal, sys

class _Sink:
    """Keeps the first few thousand characters the solution prints; the rest is dropped."""
    def __init__(self):
        self.parts, self.size = [], 0
    def write(self, text):
        if self.size < 2000:
            self.parts.append(text[:2000 - self.size])
        self.size += len(text)
        return len(text)
    def flush(self):
        pass

class _Timeout(BaseException):
    pass

def _on_alarm(signum, frame):
    raise _Timeout()

def _run(source, name, namespace, budget_s):
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        exec(compile(source, name, "exec"), namespace)
        return None
    except _Timeout:
        return "timed out after %.2f s" % budget_s
    except BaseException as error:
        message = str(error)
        return ("%s: %s" % (type(error).__name__, message) if message else type(error).__name__)[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)

def _main(nonce, solution, tests, budget_s):
    real_stdout = sys.stdout
    sink = _Sink()
    sys.stdout = sink
    namespace = {"__name__": "__solution__"}
    solution_error = _run(solution, "solution.py", namespace, budget_s)
    results = [_run(test, "test_%d" % index, namespace, budget_s) for index, test in enumerate(tests)]
    report = {"solution_error": solution_error, "results": results, "printed": "".join(sink.parts)}
    real_stdout.write("\n" + nonce + json.dumps(report) + "\n")
    real_stdout.flush()

_config = json.loads(sys.stdin.read())
_main(_config["nonce"], _config["solution"], _config["tests"], _config["budget_s"])
'''


def run_unit_tests(code: str, tests: list[str], *, limits: SandboxLimits | None = None) -> Grade:
    """Run `code` then each test (a Python snippet, e.g. an assert) in ONE sandbox process; reward = passed/total."""
    if not isinstance(code, str):
        raise TypeError(f"run_unit_tests: code must be a str, got {type(code).__name__}")
    if not tests or not all(isinstance(test, str) for test in tests):
        raise ValueError("run_unit_tests: tests must be a non-empty list of str")
    limits = limits if limits is not None else SandboxLimits(timeout_s=10.0, cpu_s=10)
    budget_s = max(0.05, 0.8 * limits.timeout_s / (len(tests) + 1))
    nonce = "@@grader-" + secrets.token_hex(8) + "@@"
    config = {"nonce": nonce, "solution": code, "tests": tests, "budget_s": budget_s}
    result = run_python(_HARNESS, stdin=json.dumps(config), limits=limits)
    total = len(tests)
    report = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce):
            report = json.loads(line[len(nonce):])
            break
    if report is None or len(report.get("results", [])) != total:
        error = result.killed_reason or f"the solution ended the test harness early (exit code {result.returncode})"
        return Grade(0.0, False, {"tests_passed": 0, "tests_total": total, "sandbox_error": error,
                                  "stderr": result.stderr[-1000:], "network_isolated": result.network_isolated})
    failures = {str(index): message for index, message in enumerate(report["results"]) if message is not None}
    passed = total - len(failures)
    details = {"tests_passed": passed, "tests_total": total, "failures": failures,
               "network_isolated": result.network_isolated}
    if report["solution_error"]:
        details["solution_error"] = report["solution_error"]
    if report["printed"]:
        details["printed"] = report["printed"]
    return Grade(passed / total, passed == total, details)


# ---------------------------------------------------------------- registry

GRADERS: dict[str, Callable[[str, str], Grade]] = {
    "exact": grade_exact,
    "numeric": grade_numeric,
    "contains": grade_contains,
    "regex": grade_regex,
    "python_tests": grade_python_tests,
}


def _check_grader(grader: str) -> Callable[[str, str], Grade]:
    if grader not in GRADERS:
        raise ValueError(f"unknown grader {grader!r}; choose one of: {', '.join(GRADERS)}")
    return GRADERS[grader]


def grade(grader: str, response: str, answer: str) -> Grade:
    """Grade one response with the named grader. Unknown grader or malformed answer -> ValueError."""
    function = _check_grader(grader)
    if not isinstance(response, str) or not isinstance(answer, str):
        raise TypeError("grade: response and answer must be str")
    return function(response, answer)


def validate_answer(grader: str, answer: str) -> None:
    """Check that `answer` is usable with `grader` (called by the dataset loader on every row); ValueError if not."""
    _check_grader(grader)
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError(f"{grader} grader: the answer must be a non-empty string, got {answer!r}")
    if grader == "numeric":
        _parse_number(answer)
    elif grader == "regex":
        _compile_regex(answer)
    elif grader == "python_tests":
        split_tests(answer)
