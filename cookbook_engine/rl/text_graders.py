"""The text graders: each reads ONE committed answer from a reply, by a stated rule, and compares it with the answer.

A grader that pays when the right answer appears *somewhere* in a reply pays a policy for hedging ("41 or 42 or 43",
a list of every capital). So each rule below is an allow-list: what counts as the reply's answer, and when a reply
has committed to none (score 0). A reply that has not committed but holds the right answer among several candidates
is marked `hedged` (Transcripts' badge, `env/text/hedged_frac`).

- `exact`: the whole reply equals the answer, ignoring case (casefold) and runs of whitespace.
- `numeric`: the reply's committed number equals the answer.
    1. "answer" followed by a number ("The answer is 42", "Answer: 42", "final answer = 42"): that number. Every such
       statement must give the same number, and no other number may follow the last one ("Answer: 41 or 42" -> 0).
    2. otherwise "=" or "is" followed by a number ("7 + 5 = 12", "The sum is 85"): all of them must give the same
       number, and no other number may follow ("x = 41 or x = 42" -> 0; working with several results needs rule 1).
    3. otherwise the reply's only number ("42", "42."; "41 or 42 or 43" -> 0).
   Integer answers are compared exactly (any number of digits: 10**20 + 1 is not 10**20). An answer written with a
   decimal point or an exponent ("3.14", "2.5e3") is a float answer: the reply's number may differ by the row's
   `tolerance` (relative; default 1e-6).
- `contains`: the answer's words and numbers appear in the reply as whole words, in order ("4" is not in "14" or
   "4th"; "paris" is in "Paris."), words compared after casefold (no other folding: accents count), numbers by value
   ("1,000" = "1000"). A reply holding several candidate answers scores 0: for an answer that is one number, any other
   number in the reply; for any answer, the answer of another row of the same dataset (a list of every capital).
- `regex`: the answer is a pattern that must match the WHOLE reply, stripped of surrounding whitespace (write
   `(?s).*` on a side to allow other text there; `(?i)` ignores case). Patterns run on RE2 (google-re2): linear time
   in the reply's length, whatever the pattern, so catastrophic backtracking cannot happen; RE2's syntax has no
   backreferences or lookaround, and the dataset check refuses such a pattern (and one over MAX_PATTERN_CHARS) with the
   row named. `\\d` and `\\w` are ASCII in RE2.

Numbers, for every grader: written with the ASCII digits 0-9, an optional sign, thousands commas ("1,234"), a
decimal point with digits on both sides ("0.5", not ".5") and an exponent of at most three digits ("1.5e3"). A number
touching a letter or digit is not one ("x42y", "5km", "3.14.15"); a '-' right after a digit, a letter or ')' is an
operator or a range, not a sign ("3-5" is 3 and 5, never -5). U+2212 (−) is read as a minus sign. Digits of other
scripts ("٤٢", full-width "４２") are never read as numbers: a reply holding any scores 0 under numeric and contains
(it cannot smuggle a candidate the grader does not see), and an answer holding any is refused at the dataset check.
Replies longer than MAX_REPLY_CHARS score 0.

Not here: python_tests (graders.py and rl/code_grading.py), the dataset loader (datasets.py calls validate_* on
every row), the RL env (envs.py turns a Grade into a reward and metrics).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

DEFAULT_TOLERANCE = 1e-6  # relative, for float answers only
MAX_REPLY_CHARS = 200_000
MAX_PATTERN_CHARS = 2_000


@dataclass
class Grade:
    reward: float
    correct: bool
    details: dict = field(default_factory=dict)


# ---------------------------------------------------------------- numbers

_NUMBER_BODY = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]{1,3})?"
_NUMBER = re.compile(r"(?<![\w.])[-+]?" + _NUMBER_BODY + r"(?!\w|\.[0-9])")
_MARKER = re.compile(
    r"(?i)(?:(?P<strong>\banswer\b(?:\s+is\b)?)|(?P<weak>=|\bis\b))[\s:=*$(\[]*",
)
_TOKEN = re.compile(r"(?P<number>" + _NUMBER.pattern + r")|(?P<word>[^\W_]+)")


def foreign_digits(text: str) -> list[str]:
    """The decimal digits in `text` outside ASCII 0-9 (Arabic-Indic, full-width, ...), which are never read."""
    return sorted({c for c in text if c.isdecimal() and not "0" <= c <= "9"})


def _value(token: str) -> Decimal:
    return Decimal(token.replace(",", ""))


def _distinct(values: Iterable[Decimal]) -> list[Decimal]:
    seen: list[Decimal] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def numbers(text: str) -> list[tuple[int, Decimal]]:
    """(start, value) of every number in `text`, by the policy above."""
    return [(m.start(), _value(m.group())) for m in _NUMBER.finditer(text.replace("\u2212", "-"))]


@dataclass(frozen=True)
class Reading:
    """What a reply commits to: `value` (None when it commits to no single number), the competing `candidates`
    (distinct numbers the rule weighed) and the `rule` that decided."""

    value: Decimal | None
    candidates: list[Decimal]
    rule: str


def committed_number(text: str) -> Reading:
    """The reply's one committed number, by the numeric rule in the module docstring."""
    text = text.replace("\u2212", "-")
    found = numbers(text)
    if not found:
        return Reading(None, [], "no number")
    at = dict(found)
    statements: dict[str, list[tuple[int, Decimal]]] = {"strong": [], "weak": []}
    for match in _MARKER.finditer(text):
        if match.end() in at:
            statements["strong" if match.group("strong") else "weak"].append((match.end(), at[match.end()]))
    for kind, rule in (("strong", "answer"), ("weak", "'=' / 'is'")):
        if statements[kind]:
            last = statements[kind][-1][0]
            stated = [value for _, value in statements[kind]]
            candidates = _distinct(stated + [value for start, value in found if start > last])
            return Reading(candidates[0] if len(candidates) == 1 else None, candidates, rule)
    candidates = _distinct(value for _, value in found)
    return Reading(candidates[0] if len(candidates) == 1 else None, candidates, "only number")


def parse_number(answer: str) -> Decimal:
    """A numeric answer: exactly one number by the policy above; ValueError naming the rule otherwise."""
    text = answer.strip().replace("\u2212", "-")
    if not _NUMBER.fullmatch(text):
        raise ValueError(
            f"numeric grader: the answer {answer!r} is not a number (write it with the digits 0-9, e.g. 42, -3.5, "
            "1,000 or 2.5e3)"
        )
    return _value(text)


def is_float_answer(answer: str) -> bool:
    text = answer.strip().lower()
    return "." in text or "e" in text


def numbers_match(found: Decimal, answer: str, tolerance: float | None = None) -> bool:
    """Integers exactly; float answers within `tolerance` (relative, default DEFAULT_TOLERANCE)."""
    expected = parse_number(answer)
    try:
        if not is_float_answer(answer):
            return found == expected
        allowed = Decimal(repr(DEFAULT_TOLERANCE if tolerance is None else tolerance)) * abs(expected)
        return abs(found - expected) <= max(allowed, Decimal("1e-12"))
    except InvalidOperation:  # exponents too far apart to subtract: not equal
        return False


def validate_tolerance(answer: str, tolerance: object) -> float | None:
    """A row's `tolerance` setting: None, or a number in [0, 1) for a float answer; ValueError otherwise."""
    if tolerance is None:
        return None
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"numeric grader: tolerance {tolerance!r} must be a relative tolerance in [0, 1)")
    if not is_float_answer(answer):
        raise ValueError(
            f"numeric grader: tolerance is for float answers; {answer!r} is an integer, compared exactly "
            f"(write it as {answer.strip()}.0 to allow a tolerance)"
        )
    return float(tolerance)


# ---------------------------------------------------------------- the graders


def _refused_reply(response: str) -> str | None:
    if len(response) > MAX_REPLY_CHARS:
        return f"the reply is over {MAX_REPLY_CHARS} characters"
    digits = foreign_digits(response)
    if digits:
        return f"the reply writes digits outside 0-9 ({''.join(digits[:5])}), which are never read as numbers"
    return None


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def grade_exact(response: str, answer: str) -> Grade:
    correct = len(response) <= MAX_REPLY_CHARS and _normalise(response) == _normalise(answer)
    return Grade(float(correct), correct, {})


def grade_numeric(response: str, answer: str, *, tolerance: float | None = None) -> Grade:
    expected = parse_number(answer)
    details: dict = {"expected": float(expected), "found": None, "hedged": False}
    refused = _refused_reply(response)
    if refused:
        return Grade(0.0, False, {**details, "error": refused})
    reading = committed_number(response)
    details["rule"] = reading.rule
    if reading.value is None:
        candidates = reading.candidates
        details["hedged"] = any(numbers_match(value, answer, tolerance) for value in candidates)
        if candidates:
            details["candidates"] = [float(value) for value in candidates[:20]]
            details["error"] = f"no single committed number ({len(candidates)} candidates by rule {reading.rule})"
        return Grade(0.0, False, details)
    details["found"] = float(reading.value)
    correct = numbers_match(reading.value, answer, tolerance)
    return Grade(float(correct), correct, details)


def _tokens(text: str) -> list[tuple[str, object]]:
    """Words (casefolded) and numbers (by value) in order: ("w", "paris"), ("n", Decimal("4"))."""
    text = text.replace("\u2212", "-")
    return [
        ("n", _value(m.group("number"))) if m.group("number") else ("w", m.group("word").casefold())
        for m in _TOKEN.finditer(text)
    ]


def _find(needle: Sequence, haystack: Sequence) -> bool:
    return any(list(haystack[i : i + len(needle)]) == list(needle) for i in range(len(haystack) - len(needle) + 1))


def grade_contains(response: str, answer: str, *, other_answers: Iterable[str] = ()) -> Grade:
    wanted = _tokens(answer)
    details: dict = {"hedged": False}
    refused = _refused_reply(response)
    if refused:
        return Grade(0.0, False, {**details, "error": refused})
    reply = _tokens(response)
    present = _find(wanted, reply)
    rivals: list[str] = []
    if len(wanted) == 1 and wanted[0][0] == "n":
        rivals = [str(value) for kind, value in reply if kind == "n" and value != wanted[0][1]]
    for other in other_answers:
        other_tokens = _tokens(other)
        if other_tokens and not _find(other_tokens, wanted) and not _find(wanted, other_tokens):
            if _find(other_tokens, reply):
                rivals.append(other)
    if rivals and present:
        details.update(hedged=True, candidates=rivals[:20], error="the reply holds several candidate answers")
    correct = present and not rivals
    return Grade(float(correct), correct, details)


# ---------------------------------------------------------------- regex on RE2


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str):
    """The pattern compiled by RE2; ValueError naming why it is refused."""
    import re2  # type: ignore[import-untyped]

    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"regex grader: the pattern is over {MAX_PATTERN_CHARS} characters")
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        message = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        raise ValueError(
            f"regex grader: the answer {pattern!r} is not a pattern RE2 accepts ({message}); RE2 runs in linear time "
            "and has no backreferences or lookaround"
        ) from None


def grade_regex(response: str, answer: str) -> Grade:
    compiled = compile_regex(answer)
    if len(response) > MAX_REPLY_CHARS:
        return Grade(0.0, False, {"error": f"the reply is over {MAX_REPLY_CHARS} characters"})
    correct = compiled.fullmatch(response.strip()) is not None
    return Grade(float(correct), correct, {})


# ---------------------------------------------------------------- checks at dataset load


def validate_text_answer(grader: str, answer: str) -> None:
    """ValueError when `answer` cannot be graded by the text grader `grader` (called for every dataset row)."""
    if grader in ("numeric", "contains"):
        digits = foreign_digits(answer)
        if digits:
            raise ValueError(
                f"{grader} grader: the answer {answer!r} writes digits outside 0-9 ({''.join(digits)}); write it "
                "with 0-9"
            )
    if grader == "numeric":
        parse_number(answer)
    elif grader == "contains" and not _tokens(answer):
        raise ValueError(f"contains grader: the answer {answer!r} holds no word or number to look for")
    elif grader == "regex":
        compile_regex(answer)
