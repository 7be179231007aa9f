"""Grade model-written code without trusting it: the solution and the tests never share a process.

RL optimises whatever the reward measures, so the grader is attack surface. A solution that runs in the same
interpreter as the tests can reach them (`sys.modules['__main__']`, frames, `gc`), forge the report, patch `json`,
or return an object whose `__eq__` is always true. Here three parties take part:

- the **solution process** (sandboxed) runs the model's code and then only serves calls to its functions, one JSON
  line in, one JSON line out. It never receives the tests or the expected values.
- the **test process** (sandboxed, a second sandbox with its own uid and namespaces) runs the tests (the built-in
  asserts, or a user's `python_tests`). It never loads the solution: only the problem's entry points (TestPlan,
  decided from the tests alone) are stubs that ask this process for the call; builtins, imports and the tests' own
  helpers always resolve in the test process, whatever names the solution defines. Values come back decoded from
  plain JSON, so every comparison in an assert is between plain Python values (no object of the solution's making,
  no custom `__eq__`).
- **this process** (trusted) relays the calls, checks every message from either child (type, shape, size, depth)
  before using it, enforces the time budgets, restarts a solution process that died or hung, and decides the
  verdict from the test process's per-test results. Malformed, hostile or huge traffic (from either child) gives
  reward 0 and a `sandbox_error`, never an exception; a value the solution cannot send (an object) or an exception
  it raises fails only the test that called it.

Values that cross: None, bool, int, float (nan/inf included), str, bytes, and list, tuple, set, frozenset and dict
of those, to a depth of 32. As in one process: a list, dict or set argument the solution changes in place is
changed in the tests too, a returned argument is the tests' own object (`r is xs`), a returned generator or
iterator is consumed item by item (infinite ones included), and what a call prints reaches the tests' sys.stdout
(`contextlib.redirect_stdout` works). A solution's exception arrives as SolutionError carrying `name` and
`message` (also an instance of ValueError, KeyError, ... for those ordinary types, never a StopIteration or other
control-flow exception). Not covered (a failed test says so): objects, classes or callbacks passed to or returned
from the solution, and identity or mutation below the top level of an argument. What a solution prints is kept
(the first 2000 characters) and shown in Transcripts.

Tests count only when they check something: a test passes only if it reached an assertion (an `assert`, or a
unittest assert method) and called the solution; when no test did, the grade is 0 with a `grading_error`.

What it is not: the sandbox (sandbox/) or the simple text graders (graders.py).
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import sys
import textwrap
from dataclasses import dataclass, field

from cookbook_engine.sandbox import LIMIT_REASONS, STOPPED_BY_CALLER, SandboxLimits, SandboxProcess, start_python

MAX_LINE_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NODES = 20_000
MAX_MESSAGE_CHARS = 1000
MAX_PRINTED_CHARS = 2000
MAX_SOLUTION_RESTARTS = 2
VACUOUS_TEST = "the test passed without executing an assertion on a call to the solution"
VALUE_TAGS = ("list", "tuple", "set", "frozenset", "dict", "bytes", "float")

# Shared by both children: plain values to tagged JSON and back. A list is {"list": [...]}, a dict
# {"dict": [[key, value], ...]}, bytes {"bytes": hex}, a non-finite float {"float": "nan"}.
_CODEC = r'''
import json, math, os, sys

def _encode(value, depth=0):
    if depth > 32:
        raise TypeError("value nested more than 32 deep")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind in (list, tuple, set, frozenset):
        return {kind.__name__: [_encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    raise TypeError("a %s cannot be passed between the solution and the tests" % kind.__name__)

def _decode(value):
    if value is None or type(value) in (bool, int, float, str):
        return value
    (tag, inner), = value.items()
    if tag == "list":
        return [_decode(item) for item in inner]
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](_decode(item) for item in inner)
    if tag == "dict":
        return {_decode(k): _decode(v) for k, v in inner}
    if tag == "bytes":
        return bytes.fromhex(inner)
    return float(inner)

def _describe(error):
    message = str(error)
    return (("%s: %s" % (type(error).__name__, message)) if message else type(error).__name__)[:1000]

def _protocol():
    """The real stdout becomes the protocol channel; print() and fd 1 go to stderr from now on."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel

def _send(channel, message):
    channel.write(json.dumps(message) + "\n")
    channel.flush()
'''

SOLUTION_SERVER = (
    _CODEC
    + r"""
class _Printed:
    # What the solution prints during one call: kept (capped) and sent back with the reply.
    def __init__(self):
        self.parts, self.size = [], 0
    def write(self, text):
        text = str(text)
        if self.size < 65536:
            self.parts.append(text[: 65536 - self.size])
        self.size += len(text)
        sys.stderr.write(text)
        return len(text)
    def flush(self):
        pass

_channel = _protocol()
_requests = sys.stdin
sys.stdin = open(os.devnull)
_solution = json.loads(_requests.readline())["solution"]
_namespace = {"__name__": "__solution__"}
try:
    exec(compile(_solution, "solution.py", "exec"), _namespace)
    _error = None
except BaseException as error:
    _error = _describe(error)
_names = [name for name, value in list(_namespace.items())
          if callable(value) and name.isidentifier() and not name.startswith("__")]
_send(_channel, {"ready": _names, "error": _error})
_iterators, _made = {}, [0]
_MUTABLE = (list, dict, set)

def _serve(request):
    printed = _Printed()
    saved, sys.stdout = sys.stdout, printed
    try:
        if "next" in request:
            try:
                return {"value": _encode(next(_iterators[request["next"]]))}, printed
            except StopIteration:
                del _iterators[request["next"]]
                return {"stop": True}, printed
        function = _namespace.get(request["function"])
        if not callable(function):
            raise NameError("the solution defines no function %r" % request["function"])
        args = [_decode(arg) for arg in request["args"]]
        kwargs = {key: _decode(arg) for key, arg in request["kwargs"].items()}
        result = function(*args, **kwargs)
    finally:
        sys.stdout = saved
    places = [(index, value, request["args"][index]) for index, value in enumerate(args)]
    places += [(key, value, request["kwargs"][key]) for key, value in kwargs.items()]
    reply = {}
    mutated = []
    for place, value, sent in places:
        if type(value) in _MUTABLE:
            now = _encode(value)
            if now != sent:
                mutated.append([place, now])
    if mutated:
        reply["mutated"] = mutated
    same = [place for place, value, _ in places if value is result and type(value) in _MUTABLE]
    if same:
        reply["same_as"] = same[0]
    elif hasattr(result, "__next__") and hasattr(result, "__iter__") and type(result) not in (str, bytes):
        _made[0] += 1
        _iterators[_made[0]] = result
        reply["iterator"] = _made[0]
    else:
        reply["value"] = _encode(result)
    return reply, printed

for _line in _requests:
    _request = json.loads(_line)
    try:
        _reply, _out = _serve(_request)
        if _out.parts:
            _reply["printed"] = "".join(_out.parts)
    except BaseException as error:
        _reply = {"error": str(error)[:1000], "type": type(error).__name__}
    _reply["id"] = _request["id"]
    _send(_channel, _reply)
"""
)

TEST_RUNNER = (
    _CODEC
    + r'''
import ast, builtins, itertools, signal

class SolutionError(Exception):
    """What a call to the solution raised, as one plain type: `name` (the solution's exception type) and
    `message`. For the ordinary error types of Python (ValueError, KeyError, ...) it is also an instance of that
    type, so `except ValueError` and assertRaises(ValueError, ...) work; never a StopIteration or any other
    exception that steers the test process's own loops."""
    def __init__(self, name, message):
        super().__init__(("%s: %s" % (name, message)) if message else name)
        self.name, self.message = name, message
    def __str__(self):
        return self.message if type(self).__name__ == self.name else self.args[0]

_COMPATIBLE = ("ArithmeticError", "ZeroDivisionError", "OverflowError", "FloatingPointError", "LookupError",
               "KeyError", "IndexError", "ValueError", "UnicodeError", "TypeError", "AttributeError", "NameError",
               "RuntimeError", "RecursionError", "NotImplementedError")
_KINDS = {name: type(name, (SolutionError, getattr(builtins, name)), {"__module__": "solution"})
          for name in _COMPATIBLE}

class _Timeout(BaseException):
    pass

def _on_alarm(signum, frame):
    raise _Timeout()

_channel = _protocol()
_replies = sys.stdin
_config = json.loads(_replies.readline())
_call_ids = itertools.count()
_counts = {"calls": 0, "asserts": 0}

def _asserted():
    _counts["asserts"] += 1

def _ask(message):
    call_id = next(_call_ids)
    message["call"] = call_id
    _send(_channel, message)
    while True:
        line = _replies.readline()
        if not line:
            raise SolutionError("SolutionError", "the grader stopped answering")
        reply = json.loads(line)
        if reply["id"] == call_id:  # replies to calls that timed out here are skipped
            break
    if "printed" in reply:
        sys.stdout.write(reply["printed"])
    if "error" in reply:
        raise _KINDS.get(reply["type"], SolutionError)(reply["type"], reply["error"])
    return reply

class _RemoteIterator:
    """A generator or iterator the solution returned: each next() asks the solution process for one item."""
    def __init__(self, handle):
        self.handle = handle
    def __iter__(self):
        return self
    def __next__(self):
        _counts["calls"] += 1
        reply = _ask({"next": self.handle})
        if reply.get("stop"):
            raise StopIteration
        return _decode(reply["value"])

def _update(original, new):
    if type(original) is list:
        original[:] = new
    elif type(original) in (dict, set):
        original.clear()
        original.update(new)

def _stub(name):
    def call(*args, **kwargs):
        _counts["calls"] += 1
        reply = _ask({"function": name, "args": [_encode(arg) for arg in args],
                      "kwargs": {key: _encode(value) for key, value in kwargs.items()}})
        for place, value in reply.get("mutated", ()):
            _update(args[place] if type(place) is int else kwargs[place], _decode(value))
        if "same_as" in reply:
            place = reply["same_as"]
            return args[place] if type(place) is int else kwargs[place]
        if "iterator" in reply:
            return _RemoteIterator(reply["iterator"])
        return _decode(reply["value"])
    call.__name__ = call.__qualname__ = name
    return call

class _CountAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        mark = ast.Expr(ast.Call(ast.Name("_cookbook_asserted", ast.Load()), [], []))
        return [ast.copy_location(mark, node), node]

def _compiled(source, name):
    tree = ast.fix_missing_locations(_CountAsserts().visit(ast.parse(source, name)))
    return compile(tree, name, "exec")

def _timed(action, budget_s):
    _counts["calls"] = _counts["asserts"] = 0
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        action()
        error = None
    except _Timeout:
        error = "timed out after %.2f s" % budget_s
    except BaseException as failure:
        error = _describe(failure)[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return [error, _counts["calls"], _counts["asserts"]]

def _run_case(namespace, class_name, method):
    import unittest
    result = unittest.TestResult()
    unittest.TestSuite([namespace[class_name](method)]).run(result)
    problems = result.errors + result.failures
    if problems:
        raise AssertionError(problems[0][1].strip().splitlines()[-1])
    if result.skipped:
        raise AssertionError("skipped: %s" % result.skipped[0][1])

def _count_unittest_asserts():
    import unittest
    for attribute in dir(unittest.TestCase):
        method = getattr(unittest.TestCase, attribute)
        if attribute.startswith(("assert", "fail")) and callable(method):
            def counted(*args, _method=method, **kwargs):
                _counts["asserts"] += 1
                return _method(*args, **kwargs)
            setattr(unittest.TestCase, attribute, counted)

_budget = _config["budget_s"]
_namespace = {"__name__": "__tests__", "_cookbook_asserted": _asserted}
_namespace.update({name: _stub(name) for name in _config["entry_points"]})
_results, _setup_error = [], None
for _index, (_source, _is_test) in enumerate(_config["groups"]):
    _outcome = _timed(lambda: exec(_compiled(_source, "test_%d" % _index), _namespace), _budget)
    if _is_test:
        _results.append(_outcome)
    elif _outcome[0] is not None:
        _setup_error = "the test file's setup failed: " + _outcome[0]
if _config["cases"]:
    _count_unittest_asserts()

def _later(action):
    return [_setup_error, 0, 0] if _setup_error else _timed(action, _budget)

for _name in _config["functions"]:
    _results.append(_later(lambda: _namespace[_name]()))
for _class, _method in _config["cases"]:
    _results.append(_later(lambda: _run_case(_namespace, _class, _method)))
if _config["check"]:
    _results.append(_later(lambda: _namespace["check"](_namespace[_config["check"]])))
_send(_channel, {"results": _results})
'''
)


class ProtocolError(Exception):
    """A message from a sandboxed process that this process refuses to use (shape, type, size or depth)."""


# ---------------------------------------------------------------- the tests: what runs and what is stubbed

# The solution's exception types that would steer the test process's own control flow if they crossed as
# themselves; a reply raising one of them is recorded (a hack flag), and the tests see a plain SolutionError.
CONTROL_FLOW_EXCEPTIONS = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit")
RUNNER_CALLS = ("unittest.main", "pytest.main", "main")
NO_TEST_HINT = (
    "write top-level asserts, pytest-style `def test_...():` functions, unittest.TestCase classes, or "
    "`def check(candidate):` with its entry point (`check(my_function)` or `entry_point = 'my_function'`)"
)


@dataclass(frozen=True)
class TestPlan:
    """What the test process runs, decided here from the test code alone (never from the solution):

    - `groups`: the top-level statements in order, as (source, is_test); a group ending at a top-level assert is
      one test, statements that come after the last assert join it, and with no top-level assert the statements
      are setup (not a test);
    - `functions`: pytest-style `test_*()` functions, one test each; `cases`: unittest.TestCase methods (class,
      method), one test each; `check`: the entry point passed to `check(candidate)`, one test;
    - `entry_points`: the only names stubbed by calls to the solution: for built-in problems the function the
      problem asks for; for user tests the names the tests use without defining, importing or being builtins.
    """

    groups: tuple[tuple[str, bool], ...]
    functions: tuple[str, ...] = ()
    cases: tuple[tuple[str, str], ...] = ()
    check: str | None = None
    entry_points: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(is_test for _, is_test in self.groups) + len(self.functions) + len(self.cases) + bool(self.check)

    def config(self, budget_s: float) -> dict:
        return {
            "groups": [list(group) for group in self.groups],
            "functions": list(self.functions),
            "cases": [list(case) for case in self.cases],
            "check": self.check,
            "entry_points": list(self.entry_points),
            "budget_s": budget_s,
        }


def plan_snippets(tests: list[str], entry_points: list[str]) -> TestPlan:
    """Each snippet one test (the built-in problems: one assert each), with the entry points given."""
    return TestPlan(groups=tuple((test, True) for test in tests), entry_points=tuple(entry_points))


def snippet_plan(tests: list[str]) -> TestPlan:
    """Each snippet one test; the entry points are the names the snippets use without defining them."""
    names: set[str] = set()
    for test in tests:
        try:
            names |= _free_names(ast.parse(test))
        except SyntaxError as error:
            raise ValueError(f"a test does not parse (line {error.lineno}: {error.msg}): {test[:80]!r}") from None
    return plan_snippets(tests, sorted(names))


@functools.lru_cache(maxsize=256)
def plan_tests(test_code: str) -> TestPlan:
    """Discover the tests of a user's python_tests code; ValueError (with what to change) when they would prove
    nothing: no test, no assertion, no call to the solution, a check() without entry point, pytest fixtures, or
    an import the sandbox does not have (standard library only)."""
    try:
        module = ast.parse(test_code)
    except SyntaxError as error:
        raise ValueError(
            f"python_tests grader: the test code does not parse (line {error.lineno}: {error.msg})"
        ) from None
    lines = test_code.splitlines()
    body = _inline_main_guard(module.body)
    defined = {s.name for s in body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    check_entry = _entry_point_assignment(body)
    kept: list[ast.stmt] = []
    for statement in body:
        callee, argument = _top_level_call(statement)
        if callee in RUNNER_CALLS:
            continue
        if callee == "check" and "check" in defined:
            check_entry = argument or check_entry
            continue
        if callee is not None and callee.startswith("test") and callee in defined:
            continue  # run as a test function below
        kept.append(statement)
    functions, cases = _test_functions(kept), _test_cases(kept)
    has_check = any(isinstance(s, ast.FunctionDef) and s.name == "check" for s in kept)
    if has_check and check_entry is None:
        raise ValueError(
            "python_tests grader: `def check(candidate)` needs its entry point: add `check(my_function)` at the end "
            "or `entry_point = 'my_function'`"
        )
    _refuse_foreign_imports(module)
    groups = _statement_groups(kept, lines)
    free = _free_names(module) | ({check_entry} if has_check and check_entry else set())
    plan = TestPlan(
        groups=tuple(groups),
        functions=tuple(functions),
        cases=tuple(cases),
        check=check_entry if has_check else None,
        entry_points=tuple(sorted(free)),
    )
    if plan.total == 0:
        raise ValueError(f"python_tests grader: the test code defines no test; {NO_TEST_HINT}")
    if not _has_assertion(module):
        raise ValueError(
            "python_tests grader: the test code executes no assertion (no `assert`, no self.assert...()), so any "
            "reply would pass"
        )
    if not plan.entry_points:
        raise ValueError(
            "python_tests grader: the tests call no function of the solution (every name they use is defined, "
            "imported or built in), so they cannot tell a right reply from a wrong one"
        )
    return plan


def _inline_main_guard(body: list[ast.stmt]) -> list[ast.stmt]:
    """`if __name__ == "__main__": ...` blocks count as top-level code (the tests run whatever their name)."""
    flat: list[ast.stmt] = []
    for statement in body:
        test = statement.test if isinstance(statement, ast.If) else None
        if (
            isinstance(statement, ast.If)
            and isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
        ):
            flat.extend(_inline_main_guard(statement.body))
        else:
            flat.append(statement)
    return flat


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _top_level_call(statement: ast.stmt) -> tuple[str | None, str | None]:
    """(callee, the name of its first argument) for a statement that is a bare call, else (None, None)."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return None, None
    call = statement.value
    argument = call.args[0].id if call.args and isinstance(call.args[0], ast.Name) else None
    return _dotted(call.func), argument


def _entry_point_assignment(body: list[ast.stmt]) -> str | None:
    for statement in body:
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
            names = {t.id for t in statement.targets if isinstance(t, ast.Name)}
            if names & {"entry_point", "ENTRY_POINT"} and isinstance(statement.value.value, str):
                if statement.value.value.isidentifier():
                    return statement.value.value
    return None


def _test_functions(body: list[ast.stmt]) -> list[str]:
    functions = []
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and statement.name.startswith("test"):
            arguments = statement.args
            if isinstance(statement, ast.AsyncFunctionDef):
                raise ValueError(f"python_tests grader: `async def {statement.name}` tests are not supported")
            if len(arguments.args) + len(arguments.posonlyargs) > len(arguments.defaults) or any(
                default is None for default in arguments.kw_defaults
            ):
                raise ValueError(
                    f"python_tests grader: `{statement.name}` takes arguments (pytest fixtures or parametrize), "
                    "which the sandbox cannot provide; give every argument a default or write one test per case"
                )
            functions.append(statement.name)
    return functions


def _test_cases(body: list[ast.stmt]) -> list[tuple[str, str]]:
    cases = []
    for statement in body:
        if isinstance(statement, ast.ClassDef) and any(
            (_dotted(base) or "").endswith("TestCase") for base in statement.bases
        ):
            for item in statement.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                    cases.append((statement.name, item.name))
    return cases


def _statement_groups(body: list[ast.stmt], lines: list[str]) -> list[tuple[str, bool]]:
    groups: list[list[ast.stmt]] = [[]]
    for statement in body:
        groups[-1].append(statement)
        if isinstance(statement, ast.Assert):
            groups.append([])
    if not groups[-1]:
        groups.pop()
    elif len(groups) > 1:  # statements after the last assert belong to the last test
        groups[-2].extend(groups.pop())
    has_asserts = any(isinstance(statement, ast.Assert) for statement in body)
    result = []
    for group in groups:
        source = "\n".join(_source_of(statement, lines) for statement in group)
        result.append((source, has_asserts))
    return result


def _source_of(statement: ast.stmt, lines: list[str]) -> str:
    """A statement's own lines, dedented when it came from inside an `if __name__ == "__main__":` block."""
    start = statement.lineno - 1
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and statement.decorator_list:
        start = statement.decorator_list[0].lineno - 1
    text = "\n".join(lines[start : statement.end_lineno])
    return textwrap.dedent(text) if statement.col_offset else text


def _free_names(module: ast.Module) -> set[str]:
    """Names the tests use without binding them anywhere (assignment, def, class, import, argument, for, with,
    except, comprehension) and that are not builtins: the calls that must go to the solution."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound.update(node.names)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return {name for name in loaded - bound if not hasattr(builtins, name) and name != "__name__"}


def _has_assertion(module: ast.Module) -> bool:
    for node in ast.walk(module):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr.startswith(("assert", "fail")):
                return True
    return False


def _refuse_foreign_imports(module: ast.Module) -> None:
    for node in ast.walk(module):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            if name.split(".")[0] not in sys.stdlib_module_names:
                raise ValueError(
                    f"python_tests grader: the tests import {name!r}, which the sandbox does not have (it runs the "
                    "standard library only; unittest and plain asserts work)"
                )


@dataclass
class CodeVerdict:
    """What the trusted side concluded: per-test failure messages (None = passed), or why grading failed."""

    results: list[str | None] | None = None
    sandbox_error: str | None = None
    solution_error: str | None = None
    grading_error: str | None = None  # the tests ran but proved nothing (no assertion on a call to the solution)
    printed: str = ""
    stderr: str = ""
    network_isolated: bool = True
    runtime_flags: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- checking what the children send


def parse_message(line: bytes | None) -> dict:
    """One JSON object line from a child, or ProtocolError. Never raises anything else."""
    if line is None:
        raise ProtocolError(
            f"no complete reply (the process ended, went silent, or wrote a line over {MAX_LINE_BYTES} bytes)"
        )
    try:
        message = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError) as error:
        raise ProtocolError(f"a reply that is not JSON ({type(error).__name__})") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"a reply that is a {type(message).__name__}, not an object")
    return message


def check_value(value, depth: int = 0, budget: list[int] | None = None) -> None:
    """A tagged plain value (see _CODEC), within MAX_DEPTH and MAX_NODES; ProtocolError otherwise."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise ProtocolError(f"a value larger than {MAX_NODES} items or deeper than {MAX_DEPTH}")
    if value is None or type(value) in (bool, int, float, str):
        return
    if type(value) is not dict or len(value) != 1:
        raise ProtocolError("a value that is not a tagged plain value")
    ((tag, inner),) = value.items()
    if tag == "bytes" or tag == "float":
        if type(inner) is not str or (tag == "float" and inner not in ("nan", "inf", "-inf")):
            raise ProtocolError(f"a malformed {tag} value")
        return
    if tag not in VALUE_TAGS or type(inner) is not list:
        raise ProtocolError(f"an unknown value tag {str(tag)[:40]!r}")
    for item in inner:
        if tag == "dict":
            if type(item) is not list or len(item) != 2:
                raise ProtocolError("a malformed dict item")
            check_value(item[0], depth + 1, budget)
            check_value(item[1], depth + 1, budget)
        else:
            check_value(item, depth + 1, budget)


def _short_text(value, what: str) -> str:
    if type(value) is not str:
        raise ProtocolError(f"{what} is not a string")
    return value[:MAX_MESSAGE_CHARS]


def check_ready(message: dict) -> tuple[list[str], str | None]:
    names = message.get("ready")
    if type(names) is not list or len(names) > 1000 or not all(type(n) is str and n.isidentifier() for n in names):
        raise ProtocolError("the solution's list of functions is malformed")
    error = message.get("error")
    return names, None if error is None else _short_text(error, "the solution's error")


def _check_place(place, request: dict) -> int | str:
    """An argument position of `request` (index into args, or a keyword name)."""
    if type(place) is int and 0 <= place < len(request.get("args", ())):
        return place
    if type(place) is str and place in request.get("kwargs", {}):
        return place
    raise ProtocolError("a reply naming an argument the call did not pass")


def check_reply(message: dict, request: dict) -> dict:
    """A reply of the solution process to `request`, re-built from checked parts only."""
    call_id = request["id"]
    if message.get("id") != call_id or type(message.get("id")) is not int:
        raise ProtocolError("a reply to a call that was not asked")
    reply: dict = {"id": call_id}
    if "printed" in message:
        reply["printed"] = _short_text(message["printed"], "the printed text")
    if "error" in message:
        kind = _short_text(message.get("type"), "the exception type")
        reply.update(error=_short_text(message["error"], "the exception text"), type=kind)
        if not kind.isidentifier():
            reply["type"] = "Exception"
        return reply
    if "next" in request:
        if message.get("stop") is True:
            return {**reply, "stop": True}
    else:
        mutated = message.get("mutated", [])
        if type(mutated) is not list or not all(type(item) is list and len(item) == 2 for item in mutated):
            raise ProtocolError("a malformed list of mutated arguments")
        checked = []
        budget = [MAX_NODES]
        for place, value in mutated:
            check_value(value, 1, budget)
            checked.append([_check_place(place, request), value])
        if checked:
            reply["mutated"] = checked
        if "same_as" in message:
            return {**reply, "same_as": _check_place(message["same_as"], request)}
        if "iterator" in message:
            if type(message["iterator"]) is not int:
                raise ProtocolError("a malformed iterator handle")
            return {**reply, "iterator": message["iterator"]}
    if "value" not in message:
        raise ProtocolError("a reply with neither a value nor an error")
    check_value(message["value"])
    return {**reply, "value": message["value"]}


def check_call(message: dict, functions: list[str]) -> dict:
    """A call the test process asks for (a function of the solution, or the next item of an iterator it returned),
    re-built from checked parts only."""
    call_id = message.get("call")
    if type(call_id) is not int:
        raise ProtocolError("a malformed call from the tests")
    if "next" in message:
        if type(message["next"]) is not int:
            raise ProtocolError("a malformed iterator handle from the tests")
        return {"id": call_id, "next": message["next"]}
    name, args, kwargs = (message.get(key) for key in ("function", "args", "kwargs"))
    if name not in functions or type(args) is not list or type(kwargs) is not dict:
        raise ProtocolError("a malformed call from the tests")
    budget = [MAX_NODES]
    for value in [*args, *kwargs.values()]:
        check_value(value, 1, budget)
    if not all(type(key) is str and key.isidentifier() for key in kwargs):
        raise ProtocolError("a call with malformed keyword names")
    return {"id": call_id, "function": name, "args": args, "kwargs": kwargs}


def check_results(message: dict, total: int) -> list[tuple[str | None, int, int]]:
    """The per-test results of the test process: (failure or None, solution calls, assertions reached)."""
    results = message.get("results")
    if type(results) is not list or len(results) != total:
        raise ProtocolError(
            f"the tests reported {len(results) if type(results) is list else 'no'} results for {total} tests"
        )
    checked = []
    for result in results:
        if type(result) is not list or len(result) != 3 or any(type(n) is not int for n in result[1:]):
            raise ProtocolError("a malformed test result")
        failure = None if result[0] is None else _short_text(result[0], "a test's failure")
        checked.append((failure, result[1], result[2]))
    return checked


def judge(results: list[tuple[str | None, int, int]]) -> tuple[list[str | None], str | None]:
    """Per-test verdicts, and a grading error when no test reached an assertion and a call to the solution (the
    tests proved nothing, whatever they reported). A test that passed without both counts as failed."""
    verdicts = [
        failure if failure is not None or (calls and asserts) else VACUOUS_TEST for failure, calls, asserts in results
    ]
    meaningful = any(calls and asserts for _, calls, asserts in results)
    return verdicts, None if meaningful else "the tests executed no assertion on a call to the solution"


# ---------------------------------------------------------------- the relay


class _Solution:
    """The solution process, started again (at most MAX_SOLUTION_RESTARTS times) after it dies or hangs."""

    def __init__(self, code: str, limits: SandboxLimits, budget_s: float):
        self.code, self.limits, self.budget_s = code, limits, budget_s
        self.process: SandboxProcess | None = None
        self.starts = 0
        self.printed: list[str] = []
        self.ended: list[str] = []  # why earlier processes ended (killed_reason or exit code)
        self.violation: str | None = None  # the first malformed or oversized reply: the whole grade is then 0
        self.raised: set[str] = set()  # the exception types the solution's calls raised

    def start(self) -> tuple[list[str], str | None]:
        """Start (or restart) the solution and wait until it defined its functions; ProtocolError if it fails."""
        self.starts += 1
        self.process = start_python(SOLUTION_SERVER, limits=self.limits)
        self.process.send((json.dumps({"solution": self.code}) + "\n").encode())
        try:
            return check_ready(parse_message(self.process.read_line(self.budget_s + 1.0, MAX_LINE_BYTES)))
        except ProtocolError:
            self.stop()
            raise

    def call(self, request: dict) -> dict:
        """The solution's reply to one call, or an error reply when it died, hung or answered malformed."""
        if self.process is None:
            if "next" in request:
                return _error_reply(request["id"], "the solution process ended; its iterator is gone")
            if self.starts > MAX_SOLUTION_RESTARTS:
                return _error_reply(request["id"], "the solution process ended too often; no more calls")
            try:
                self.start()
            except ProtocolError as error:
                return _error_reply(request["id"], f"the solution could not be started again: {error}")
        process = self.process
        assert process is not None  # started above
        process.send((json.dumps(request) + "\n").encode())
        line = process.read_line(self.budget_s, MAX_LINE_BYTES)
        try:
            reply = check_reply(parse_message(line), request)
        except ProtocolError as error:
            too_long = process.unread_stdout_bytes > MAX_LINE_BYTES
            reason = self.stop()
            if line is not None or too_long:
                reason = f"a reply over {MAX_LINE_BYTES} bytes" if too_long else f"a malformed reply: {error}"
                self.violation = self.violation or reason
            return _error_reply(request["id"], reason or str(error))
        if "error" in reply:
            self.raised.add(reply["type"])
        return reply

    def stop(self) -> str | None:
        """End the current process; returns why it ended (None when none was running)."""
        if self.process is None:
            return None
        process = self.process
        result = process.finish() if process.exited else process.kill()
        self.process = None
        self.printed.append(result.stderr)
        reason = result.killed_reason or f"exit code {result.returncode}"
        if result.killed_reason == STOPPED_BY_CALLER:
            reason = f"timed out after {self.budget_s:.2f} s"
        self.ended.append(reason)
        return reason


def _error_reply(call_id: int, message: str) -> dict:
    return {"id": call_id, "error": message[:MAX_MESSAGE_CHARS], "type": "SolutionError"}


def max_calls(total_tests: int) -> int:
    """How many calls the tests may make in all: generous (honest tests loop over hundreds of cases); the time
    budgets bound the rest."""
    return 10_000 + 2_000 * total_tests


def run_code_tests(code: str, plan: TestPlan, limits: SandboxLimits) -> CodeVerdict:
    """Run the tests of `plan` against `code` with the three-party design above; never raises for anything the
    children do."""
    total = plan.total
    budget_s = max(0.05, 0.8 * limits.timeout_s / (total + 1))
    solution = _Solution(code, limits, budget_s)
    verdict = CodeVerdict()
    runner = start_python(TEST_RUNNER, limits=limits)
    try:
        try:
            _, verdict.solution_error = solution.start()
        except ProtocolError:
            reason = solution.ended[-1] if solution.ended else "it did not start"
            verdict.sandbox_error = (
                "timeout"
                if reason.startswith("timed out")
                else reason
                if reason in LIMIT_REASONS
                else f"the solution ended before the tests could call it ({reason})"
            )
            return verdict
        runner.send((json.dumps(plan.config(2 * budget_s + 0.5)) + "\n").encode())
        results = _relay(runner, solution, list(plan.entry_points), total)
        if solution.violation:
            raise ProtocolError(f"the solution's process sent {solution.violation}")
        verdict.results, verdict.grading_error = judge(results)
    except ProtocolError as error:
        verdict.results = None
        verdict.sandbox_error = f"grading stopped: {error}"
    finally:
        solution.stop()
        runner_result = runner.finish() if runner.exited else runner.kill()
        verdict.network_isolated = runner_result.network_isolated
        verdict.stderr = runner_result.stderr[-1000:]
        verdict.printed = "".join(solution.printed)[:MAX_PRINTED_CHARS]
        if verdict.results is None and verdict.sandbox_error is None:
            verdict.sandbox_error = runner_result.killed_reason or "the tests ended early"
        if solution.raised & set(CONTROL_FLOW_EXCEPTIONS):
            verdict.runtime_flags.append("exceptions as control flow")
    return verdict


def _relay(
    runner: SandboxProcess, solution: _Solution, functions: list[str], total: int
) -> list[tuple[str | None, int, int]]:
    """Pass the test process's calls to the solution and the checked replies back, until the results come."""
    calls_left = max_calls(total)
    while True:
        message = parse_message(runner.read_line(float("inf"), MAX_LINE_BYTES))
        if "results" in message:
            return check_results(message, total)
        calls_left -= 1
        if calls_left < 0:
            raise ProtocolError(f"the tests made more than {max_calls(total)} calls")
        reply = solution.call(check_call(message, functions))
        if not runner.send((json.dumps(reply) + "\n").encode()):
            raise ProtocolError("the tests stopped reading")
