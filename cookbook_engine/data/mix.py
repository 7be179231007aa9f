"""Multi-task mixes: `dataset=builtin:facts:2,my.jsonl:1` trains SL on several datasets at once, each with a weight,
and `env=arithmetic:2,code:1` trains RL on several environments (the RL half is rl/mix.py's; the syntax, its
refusals and the per-step draw of groups are here, their one home).

The syntax: datasets separated by commas, each optionally followed by `:WEIGHT` (a number; none means 1). Weights are
shares of the training examples: with weights 2 and 1, two thirds of each epoch's examples come from the first
dataset and a third from the second. An epoch has as many examples as the datasets' training rows together; a
dataset whose share is more than its rows repeats them (whole passes, then a seeded sample of the rest), one whose
share is less gives a seeded sample. A weight of 0 trains on nothing from that dataset but still reports its
held-out metrics. Each dataset keeps its own held-out share (test_fraction), logged as `test/<name>/nll` beside the
mix's `test/nll`, and each step logs `train/<name>/nll` for the datasets in its batch; <name> is the built-in's name
or the file's name without extension.

`parse_mix(spec, setting="dataset")` reads the syntax and refuses, with one message naming the setting and the
problem, a weight below 0, weights that do not sum to a positive number, an empty entry and two entries of one name;
`mixed(parts, seed)` draws an SL epoch; `step_counts(parts, total, rng)` splits one RL step's groups by weight.
Not here: loading or rendering the datasets (loading.py, sl/data.py), building the envs (rl/mix.py).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cookbook_engine.data.loading import DatasetError

BUILTIN_PREFIX = "builtin:"
Item = TypeVar("Item")


@dataclass(frozen=True)
class MixPart:
    spec: str  # the dataset: builtin:NAME, a file or hf:owner/name
    weight: float

    @property
    def name(self) -> str:
        return short_name(self.spec)


def short_name(spec: str) -> str:
    """How a dataset or eval set is named in metric names: the built-in's name, else the file's name without
    extension (test/<name>/...)."""
    return spec[len(BUILTIN_PREFIX) :] if spec.startswith(BUILTIN_PREFIX) else Path(spec).stem


def _weight_of(entry: str) -> tuple[str, float | None]:
    """(dataset, weight) of one entry; the weight is None when the entry ends in no `:NUMBER`."""
    head, sep, tail = entry.rpartition(":")
    if not sep or not head:
        return entry, None
    try:
        return head.strip(), float(tail)
    except ValueError:
        return entry, None


EXAMPLES = {"dataset": "dataset=a.jsonl:2,b.jsonl:1", "env": "env=arithmetic:2,code:1"}


def parse_mix(spec: str, setting: str = "dataset") -> list[MixPart]:
    """The entries and weights of a `dataset=` (or `env=`) value (one entry without a weight is a mix of one)."""
    noun = "env" if setting == "env" else "dataset"
    entries = [entry.strip() for entry in spec.split(",")]
    if len(entries) > 1 and not all(entries):
        raise DatasetError(f"{setting}={spec}: an empty entry between commas; write {EXAMPLES[noun]}")
    parts = []
    for entry in entries:
        name, weight = _weight_of(entry)
        if weight is not None and (not math.isfinite(weight) or weight < 0):
            raise DatasetError(f"{setting}={spec}: {name} has weight {weight:g}; a weight is a number 0 or more")
        parts.append(MixPart(name, 1.0 if weight is None else weight))
    if sum(part.weight for part in parts) <= 0:
        raise DatasetError(f"{setting}={spec}: the weights sum to 0; give at least one {noun} a positive weight")
    names = [part.name for part in parts]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise DatasetError(f"{setting}={spec}: {', '.join(twice)} named twice; each {noun} once, with one weight")
    return parts


def is_mix(spec: str) -> bool:
    """More than one dataset, or one with a weight. A file that exists under the whole spec is one dataset, commas
    in its name or not (`dataset=reviews,2024.jsonl`); inside a mix such a file cannot be named (rename it)."""
    if Path(spec.strip()).is_file():
        return False
    return "," in spec or _weight_of(spec.strip())[1] is not None


def shares(parts: list[MixPart], sizes: list[int]) -> list[int]:
    """How many of an epoch's examples each dataset gives: the datasets' rows together, split by weight (largest
    remainders rounded up, so the counts add up to the total)."""
    total, weight_sum = sum(sizes), sum(part.weight for part in parts)
    exact = [total * part.weight / weight_sum for part in parts]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(parts)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def mixed(items_by_part: list[list[Item]], counts: list[int], seed: int) -> list[Item]:
    """An epoch's examples: from each dataset its count, as whole passes over its rows and then a seeded sample."""
    rng = random.Random(seed * 1_000_033 + 17)
    epoch: list[Item] = []
    for items, count in zip(items_by_part, counts):
        if not items:
            continue
        passes, rest = divmod(count, len(items))
        epoch.extend(items * passes)
        epoch.extend(rng.sample(items, rest))
    return epoch


def step_counts(parts: list[MixPart], total: int, rng: random.Random) -> list[int]:
    """How many of one step's `total` groups each part gives: every part its whole share (total x weight / sum,
    rounded down), and the groups left over drawn without replacement, each part's chance its share's fraction. So
    weights 1 and 1 over 2 groups give one each at every step, and a weight's share holds on average over steps."""
    weight_sum = sum(part.weight for part in parts)
    exact = [total * part.weight / weight_sum for part in parts]
    counts = [math.floor(x) for x in exact]
    fractions = [x - c for x, c in zip(exact, counts)]
    for _ in range(total - sum(counts)):
        chosen = rng.choices(range(len(parts)), weights=[f if f > 0 else 0.0 for f in fractions])[0]
        counts[chosen] += 1
        fractions[chosen] = 0.0
    return counts
