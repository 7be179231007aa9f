"""Grade model-written code without trusting it: the solution and the tests never share a process.

RL optimises whatever the reward measures, so the grader is attack surface. A solution that runs in the same
interpreter as the tests can reach them (`sys.modules['__main__']`, frames, `gc`), forge the report, patch `json`,
or return an object whose `__eq__` is always true. Here three parties take part:

- the **solution process** (sandboxed) runs the model's code and then only serves calls to its functions, one JSON
  line in, one JSON line out. It never receives the tests or the expected values.
- the **test process** (sandboxed, a second sandbox with its own uid and namespaces) runs the tests (the built-in
  asserts, or a user's `python_tests`). It never loads the solution: each function the solution defined is a stub
  that asks this process for the call. Values come back decoded from plain JSON, so every comparison in an assert
  is between plain Python values (no object of the solution's making, no custom `__eq__`).
- **this process** (trusted) relays the calls, checks every message from either child (type, shape, size, depth)
  before using it, enforces the time budgets, restarts a solution process that died or hung, and decides the
  verdict from the test process's per-test results. Malformed, hostile or huge traffic (from either child) gives
  reward 0 and a `sandbox_error`, never an exception; a value the solution cannot send (an object) or an exception
  it raises fails only the test that called it.

Values that cross: None, bool, int, float (nan/inf included), str, bytes, and list, tuple, set, frozenset and dict
of those, to a depth of 32. Not covered (say so when a user's tests need it): objects, classes, generators or
callbacks passed to or returned from the solution, and mutation of arguments in place (the solution works on a
copy). What a solution prints is kept (the first 2000 characters) and shown in Transcripts.

What it is not: the sandbox (sandbox.py) or the simple text graders (graders.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cookbook_engine.sandbox import LIMIT_REASONS, STOPPED_BY_CALLER, SandboxLimits, SandboxProcess, start_python

MAX_LINE_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NODES = 20_000
MAX_MESSAGE_CHARS = 1000
MAX_PRINTED_CHARS = 2000
MAX_SOLUTION_RESTARTS = 2
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
for _line in _requests:
    _request = json.loads(_line)
    try:
        _function = _namespace[_request["function"]]
        _args = [_decode(arg) for arg in _request["args"]]
        _kwargs = {key: _decode(arg) for key, arg in _request["kwargs"].items()}
        _reply = {"id": _request["id"], "value": _encode(_function(*_args, **_kwargs))}
    except BaseException as error:
        _reply = {"id": _request["id"], "error": str(error)[:1000], "type": type(error).__name__}
    _send(_channel, _reply)
"""
)

TEST_RUNNER = (
    _CODEC
    + r'''
import builtins, itertools, signal

class SolutionError(Exception):
    """The solution's function raised an exception of a kind that is not built in, or could not be called."""

class _Timeout(BaseException):
    pass

def _on_alarm(signum, frame):
    raise _Timeout()

_channel = _protocol()
_replies = sys.stdin
_config = json.loads(_replies.readline())
_call_ids = itertools.count()

def _as_exception(reply):
    kind = getattr(builtins, reply["type"], None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(reply["error"])
    return SolutionError(reply["error"])

def _stub(name):
    def call(*args, **kwargs):
        call_id = next(_call_ids)
        _send(_channel, {"call": call_id, "function": name, "args": [_encode(arg) for arg in args],
                         "kwargs": {key: _encode(value) for key, value in kwargs.items()}})
        while True:
            line = _replies.readline()
            if not line:
                raise SolutionError("the grader stopped answering")
            reply = json.loads(line)
            if reply["id"] == call_id:  # replies to calls that timed out here are skipped
                break
        if "error" in reply:
            raise _as_exception(reply)
        return _decode(reply["value"])
    call.__name__ = call.__qualname__ = name
    return call

def _run(source, name, namespace, budget_s):
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        exec(compile(source, name, "exec"), namespace)
        return None
    except _Timeout:
        return "timed out after %.2f s" % budget_s
    except BaseException as error:
        return _describe(error)[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)

_namespace = {"__name__": "__tests__"}
_namespace.update({name: _stub(name) for name in _config["functions"]})
_results = [_run(test, "test_%d" % index, _namespace, _config["budget_s"])
            for index, test in enumerate(_config["tests"])]
_send(_channel, {"results": _results})
'''
)


class ProtocolError(Exception):
    """A message from a sandboxed process that this process refuses to use (shape, type, size or depth)."""


@dataclass
class CodeVerdict:
    """What the trusted side concluded: per-test failure messages (None = passed), or why grading failed."""

    results: list[str | None] | None = None
    sandbox_error: str | None = None
    solution_error: str | None = None
    printed: str = ""
    stderr: str = ""
    network_isolated: bool = True


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


def check_reply(message: dict, call_id: int) -> dict:
    """A reply of the solution process to call `call_id`, re-built from checked parts only."""
    if message.get("id") != call_id or type(message.get("id")) is not int:
        raise ProtocolError("a reply to a call that was not asked")
    if "error" in message:
        kind = _short_text(message.get("type"), "the exception type")
        return {
            "id": call_id,
            "error": _short_text(message["error"], "the exception text"),
            "type": kind if kind.isidentifier() else "Exception",
        }
    if "value" not in message:
        raise ProtocolError("a reply with neither a value nor an error")
    check_value(message["value"])
    return {"id": call_id, "value": message["value"]}


def check_call(message: dict, functions: list[str]) -> dict:
    """A call the test process asks for, re-built from checked parts only."""
    call_id, name, args, kwargs = (message.get(key) for key in ("call", "function", "args", "kwargs"))
    if type(call_id) is not int or name not in functions or type(args) is not list or type(kwargs) is not dict:
        raise ProtocolError("a malformed call from the tests")
    budget = [MAX_NODES]
    for value in [*args, *kwargs.values()]:
        check_value(value, 1, budget)
    if not all(type(key) is str and key.isidentifier() for key in kwargs):
        raise ProtocolError("a call with malformed keyword names")
    return {"id": call_id, "function": name, "args": args, "kwargs": kwargs}


def check_results(message: dict, total: int) -> list[str | None]:
    results = message.get("results")
    if type(results) is not list or len(results) != total:
        raise ProtocolError(
            f"the tests reported {len(results) if type(results) is list else 'no'} results for {total} tests"
        )
    return [None if result is None else _short_text(result, "a test's failure") for result in results]


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
            return check_reply(parse_message(line), request["id"])
        except ProtocolError as error:
            too_long = process.unread_stdout_bytes > MAX_LINE_BYTES
            reason = self.stop()
            if line is not None or too_long:
                reason = f"a reply over {MAX_LINE_BYTES} bytes" if too_long else f"a malformed reply: {error}"
                self.violation = self.violation or reason
            return _error_reply(request["id"], reason or str(error))

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


def run_code_tests(code: str, tests: list[str], limits: SandboxLimits) -> CodeVerdict:
    """Run `tests` against `code` with the three-party design above; never raises for anything the children do."""
    budget_s = max(0.05, 0.8 * limits.timeout_s / (len(tests) + 1))
    solution = _Solution(code, limits, budget_s)
    verdict = CodeVerdict()
    runner = start_python(TEST_RUNNER, limits=limits)
    try:
        try:
            functions, verdict.solution_error = solution.start()
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
        config = {"tests": tests, "functions": functions, "budget_s": 2 * budget_s + 0.5}
        runner.send((json.dumps(config) + "\n").encode())
        verdict.results = _relay(runner, solution, functions, len(tests))
        if solution.violation:
            raise ProtocolError(f"the solution's process sent {solution.violation}")
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
    return verdict


def _relay(runner: SandboxProcess, solution: _Solution, functions: list[str], total: int) -> list[str | None]:
    """Pass the test process's calls to the solution and the checked replies back, until the results come."""
    calls_left = 64 * total + 64
    while True:
        message = parse_message(runner.read_line(float("inf"), MAX_LINE_BYTES))
        if "results" in message:
            return check_results(message, total)
        calls_left -= 1
        if calls_left < 0:
            raise ProtocolError("the tests made too many calls")
        reply = solution.call(check_call(message, functions))
        if not runner.send((json.dumps(reply) + "\n").encode()):
            raise ProtocolError("the tests stopped reading")
