"""The tools a multi-turn RL env lets the model call, and the one syntax of a call.

A tool call is a reply that holds `<NAME>ARGUMENTS</NAME>`, e.g. `<calc>47 * 38</calc>` (the first such tag in the
reply counts). The env runs the tool and feeds its result back as the next observation (a user message
`calc: 1786`); a reply without a call is the final answer. `TOOLS` maps each tool's setting name (`tools=calculator`)
to the tag the model writes and the function that runs it.

- calculator (`<calc>`): integers joined by `+`, `-` and `*` (`*` first, then left to right), a leading minus
  allowed; nothing else: no eval, no parentheses, no division, at most 12 numbers of at most 9 digits each, so a
  call can neither run code nor take long. A malformed expression returns an error text the model sees, never
  raises.

Not here: the env that uses them (rl/multi_turn.py), rendering the result as tokens (renderers.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

CALL = re.compile(r"<([a-z_]+)>(.*?)</\1>", re.DOTALL)
NUMBER_TOKEN = re.compile(r"\s*(\d+|[-+*])")
MAX_NUMBERS, MAX_DIGITS = 12, 9


class ToolError(ValueError):
    """A call the tool cannot run; its message is what the model sees."""


def calculate(expression: str) -> str:
    """`47 * 38 + 2` -> "1788"; raises ToolError naming what is wrong."""
    text, tokens, position = expression.strip(), [], 0
    while position < len(text):
        match = NUMBER_TOKEN.match(text, position)
        if not match:
            raise ToolError(f"cannot read {text[position:].strip()[:20]!r}: use integers with + - * only")
        tokens.append(match.group(1))
        position = match.end()
    if tokens[:1] == ["-"] and len(tokens) > 1 and tokens[1].isdigit():
        tokens = [f"-{tokens[1]}", *tokens[2:]]
    numbers, operators = tokens[0::2], tokens[1::2]
    if not tokens or len(tokens) % 2 == 0 or not all(_is_int(n) for n in numbers) or any(_is_int(o) for o in operators):
        raise ToolError(f"{expression.strip()[:40]!r} is not numbers joined by + - *")
    if len(numbers) > MAX_NUMBERS or any(len(n.lstrip("-")) > MAX_DIGITS for n in numbers):
        raise ToolError(f"at most {MAX_NUMBERS} numbers of at most {MAX_DIGITS} digits")
    terms, signs = [int(numbers[0])], []
    for operator, number in zip(operators, numbers[1:]):
        if operator == "*":
            terms[-1] *= int(number)
        else:
            signs.append(operator)
            terms.append(int(number))
    total = terms[0]
    for sign, term in zip(signs, terms[1:]):
        total = total + term if sign == "+" else total - term
    return str(total)


def _is_int(token: str) -> bool:
    return token.lstrip("-").isdigit()


@dataclass(frozen=True)
class Tool:
    tag: str  # what the model writes: <tag>arguments</tag>
    run: Callable[[str], str]
    usage: str  # one line for the prompt


TOOLS: dict[str, Tool] = {
    "calculator": Tool("calc", calculate, "<calc>2 * 3 + 4</calc> (integers with + - *)"),
}


@dataclass(frozen=True)
class Call:
    tag: str
    arguments: str


def find_call(reply: str) -> Call | None:
    """The reply's first `<tag>arguments</tag>`, or None (the reply is a final answer)."""
    match = CALL.search(reply)
    return Call(match.group(1), match.group(2)) if match else None


def run_call(call: Call, tools: list[str]) -> tuple[str, bool]:
    """(the text fed back, whether the call ran): the tool's result, or an error naming what went wrong."""
    by_tag = {TOOLS[name].tag: TOOLS[name] for name in tools}
    tool = by_tag.get(call.tag)
    if tool is None:
        return f"error: unknown tool <{call.tag}>; the tools are " + ", ".join(f"<{t}>" for t in by_tag), False
    try:
        return tool.run(call.arguments), True
    except ToolError as exc:
        return f"error: {exc}", False
