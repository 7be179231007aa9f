"""The arithmetic env's problems: a fixed held-out set of two-digit problems, and a training curriculum whose
operand sizes grow over the run and that never draws a held-out problem.

- Held out (`held_out_problems()`): HELD_OUT_SIZE problems `a op b` with both operands two-digit (10..99), the ops
  in HELD_OUT_OPS (subtraction keeps a >= b), drawn once with a fixed seed: the same on every machine and for every
  run seed. The built-in eval set `builtin:arithmetic` is this list; a run's own held-out accuracy
  (test/env/all/correct) is measured on its first `num_eval_problems`.
- Training (`ArithmeticCurriculum`): each step draws fresh problems from TRAIN_OPS. Both operands are drawn from
  1..bound, where the bound grows linearly from CURRICULUM_START_MAX to 99 over the first `CURRICULUM_RAMP` share
  of the run and stays at 99 after: early steps are mostly one-digit problems the model gets right often enough to
  learn the answer format from, the rest cover the whole held-out range. CARRY_SHARE of each step's sums carry in
  the units (7 + 5, 38 + 24), the rest do not: drawn uniformly, under half of them would. A drawn problem that is
  held out or in builtin:arithmetic-fresh (or is one of those sums with its operands swapped) is drawn again, so no
  training problem is ever one the evaluations ask. A batch is a pure function of (seed, step, total steps): a
  resumed run gets the same problems.

Why it looks like this: the first version trained on a <= 12, b <= 9 and was measured on small problems; on
two-digit sums the model stayed mostly wrong, and late in a run most groups had equal rewards (all right on the
small problems) and were dropped. docs/DEFAULTS.md has the measurements behind the settings.

Not here: grading replies and the env classes (envs.py), the loop (loop.py).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

ARITHMETIC_INSTRUCTION = "Answer with just the number."
ARITHMETIC_SPLIT_SEED = 1234  # the held-out problems are the same whatever the run's seed
HELD_OUT_SIZE = 100
HELD_OUT_OPS = ("+",)
TRAIN_OPS = ("+",)
TWO_DIGITS = (10, 99)
CURRICULUM_START_MAX = 20  # the operand bound at step 0
# The share of the run over which the bound grows to 99. A quarter, not half (2026-11-27, the anchored default on
# seeds 0, 1, 2: arithmetic-fresh 0.710, 0.755, 0.595 against 0.650, 0.620, 0.685; docs/DEFAULTS.md): more of the
# run's steps train on the evaluated range.
CURRICULUM_RAMP = 0.25
# The share of each step's sums whose units digits carry (a % 10 + b % 10 >= 10); under half of uniformly drawn
# two-digit sums do (0.475 of builtin:arithmetic-fresh). Three quarters (2026-11-28, the anchored default on seeds
# 0, 1, 2: arithmetic-fresh 0.745, 0.705, 0.675 against 0.710, 0.755, 0.595; docs/DEFAULTS.md): the trained
# model's wrong answers on fresh sums were nearly all a missed carry ("57 + 49 = 96"), so more of the run's groups
# are ones it can still get wrong.
CARRY_SHARE = 0.75
STEPS_PER_EPOCH = 25  # with max_steps=0: the run's length is this many steps per epoch
OPERATIONS = {"+": "add", "-": "subtract", "*": "multiply"}


def digit_credit(found: float, answer: int) -> float:
    """The share of `answer`'s digits a wrong reply's number has in place (0..1), for partial credit: only a whole,
    non-negative number written with as many digits as the answer counts ("96" for 106 has none: a digit short), so
    no reply scores more by writing more digits, and a right answer is the only way to full credit."""
    if found != int(found) or found < 0 or answer < 0:
        return 0.0
    written, wanted = str(int(found)), str(answer)
    if len(written) != len(wanted):
        return 0.0
    return sum(mine == right for mine, right in zip(written, wanted)) / len(wanted)


@dataclass(frozen=True)
class ArithmeticProblem:
    a: int
    op: str
    b: int

    @property
    def answer(self) -> int:
        return {"+": self.a + self.b, "-": self.a - self.b, "*": self.a * self.b}[self.op]

    @property
    def question(self) -> str:
        return f"What is {self.a} {self.op} {self.b}? {ARITHMETIC_INSTRUCTION}"

    @property
    def carries(self) -> bool:
        """True for a sum whose units digits carry into the tens (7 + 5, 38 + 24)."""
        return self.op == "+" and self.a % 10 + self.b % 10 >= 10

    @property
    def tag(self) -> str:
        return OPERATIONS[self.op]

    @property
    def key(self) -> tuple[int, str, int]:
        """The same key for a + b and b + a (and a * b and b * a): one problem to the model, for the split."""
        if self.op in ("+", "*"):
            return (min(self.a, self.b), self.op, max(self.a, self.b))
        return (self.a, self.op, self.b)


def _draw(rng: random.Random, op: str, low: int, high: int) -> ArithmeticProblem:
    a, b = rng.randint(low, high), rng.randint(low, high)
    if op == "-" and a < b:
        a, b = b, a
    return ArithmeticProblem(a, op, b)


def held_out_problems() -> list[ArithmeticProblem]:
    """The fixed held-out set: HELD_OUT_SIZE distinct two-digit problems, the ops in turn."""
    rng = random.Random(ARITHMETIC_SPLIT_SEED)
    problems: list[ArithmeticProblem] = []
    seen: set[tuple[int, str, int]] = set()
    while len(problems) < HELD_OUT_SIZE:
        problem = _draw(rng, HELD_OUT_OPS[len(problems) % len(HELD_OUT_OPS)], *TWO_DIGITS)
        if problem.key not in seen:
            seen.add(problem.key)
            problems.append(problem)
    return problems


_HELD_OUT_KEYS = frozenset(problem.key for problem in held_out_problems())


def is_held_out(problem: ArithmeticProblem) -> bool:
    return problem.key in _HELD_OUT_KEYS


# Sets drawn by another procedure and seed than the held-out set and training (for builtin:arithmetic-fresh and the
# transfer sets): every ordered operand pair of the range is listed and FRESH_SIZE of them sampled without
# replacement, never a held-out problem. Training never draws a fresh two-digit sum either (training_problems), so
# builtin:arithmetic-fresh is held out as well; what differs from the held-out set is who drew it and how.
FRESH_SEED = 20261125
FRESH_SIZE = 200


def fresh_problems(op: str, low: int, high: int, size: int = FRESH_SIZE) -> list[ArithmeticProblem]:
    """`size` problems `a op b` with both operands in low..high (subtraction: a >= b), sampled from the list of all
    ordered pairs with FRESH_SEED, none in the held-out set (fewer when the range has fewer)."""
    span = high - low + 1
    picked = random.Random(FRESH_SEED).sample(range(span**2), min(span**2, 3 * size))  # distinct ordered pairs
    pairs = [(low + index // span, low + index % span) for index in picked]
    problems: list[ArithmeticProblem] = []
    for a, b in pairs:
        problem = ArithmeticProblem(max(a, b), op, min(a, b)) if op == "-" else ArithmeticProblem(a, op, b)
        if not is_held_out(problem) and problem not in problems:
            problems.append(problem)
        if len(problems) == size:
            break
    return problems


def operand_bound(step: int, total_steps: int) -> int:
    """The largest operand drawn at `step` of a `total_steps` run: CURRICULUM_START_MAX growing to 99."""
    ramp_steps = max(1.0, CURRICULUM_RAMP * total_steps)
    share = min(1.0, step / ramp_steps)
    return round(CURRICULUM_START_MAX + share * (TWO_DIGITS[1] - CURRICULUM_START_MAX))


@functools.cache
def _fresh_sum_keys() -> frozenset[tuple[int, str, int]]:
    """The problems of builtin:arithmetic-fresh (two-digit sums), which training never draws."""
    return frozenset(problem.key for problem in fresh_problems("+", *TWO_DIGITS))


def is_evaluated(problem: ArithmeticProblem) -> bool:
    """True for a problem of the built-in held-out set or of builtin:arithmetic-fresh (either order of a sum)."""
    return is_held_out(problem) or problem.key in _fresh_sum_keys()


def training_problems(seed: int, step: int, total_steps: int, count: int) -> list[ArithmeticProblem]:
    """The `count` training problems of one step: operands in 1..operand_bound(step), never a problem of the held-out
    set or of builtin:arithmetic-fresh; the first round(CARRY_SHARE * count) sums carry, the other sums do not."""
    rng = random.Random((seed * 1_000_003 + step) * 7 + 1)
    high = operand_bound(step, total_steps)
    carrying = round(CARRY_SHARE * count)
    problems: list[ArithmeticProblem] = []
    while len(problems) < count:
        problem = _draw(rng, TRAIN_OPS[len(problems) % len(TRAIN_OPS)], 1, high)
        if problem.op == "+" and problem.carries != (len(problems) < carrying):
            continue
        if not is_evaluated(problem):
            problems.append(problem)
    return problems


NULL_SPACE_SEED = 777  # the task chats of `lora_a=null_space`: a draw no run's seed makes
NULL_SPACE_STEPS, NULL_SPACE_PER_STEP = 36, 8


def null_space_task_chats() -> list[dict]:
    """The chats whose inputs `lora_a=null_space` lets LoRA read (training/null_space.py): a curriculum's worth of
    training sums (36 steps of 8, another seed than any run's), each answered with the number."""
    return [
        {"messages": [{"role": "user", "content": p.question}, {"role": "assistant", "content": str(p.answer)}]}
        for step in range(NULL_SPACE_STEPS)
        for p in training_problems(NULL_SPACE_SEED, step, NULL_SPACE_STEPS, NULL_SPACE_PER_STEP)
    ]


def curriculum_length(max_steps: int, num_epochs: int) -> int:
    """The steps a run takes on this env (max_steps, or STEPS_PER_EPOCH per epoch), which the curriculum spans."""
    return max_steps or STEPS_PER_EPOCH * num_epochs
