"""How long a run is and what each step takes: `LoopPlan` (what each loop's `plan()` returns and the New run form's
estimate reads), `plan_steps` (epochs of batches, max_steps), `PreparedData` (what SL and DPO prepare: rendered
examples or pairs), `data_plan`, `batch_at` (a step's batch, the same order on resume) and `passes_note`. Not here:
running the steps (skeleton.py), rendering the data (sl/data.py, dpo/data.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from cookbook_engine.config import CommonConfig

Item = TypeVar("Item")  # a training example (SL: a datum; DPO: a pair of datums)


@dataclass(frozen=True)
class LoopPlan:
    """How long a run is: the steps its loop runs and what the New run form's estimate shows."""

    total_steps: int
    batches_per_epoch: int  # steps per pass over the training data (RL: over the env's batches of problems)
    tokens: int  # SL and DPO: training tokens the steps process (a DPO pair counts both sides); RL: most sampled


def plan_steps(config: CommonConfig, num_examples: int) -> tuple[int, int]:
    """(batches per epoch, total steps) over `num_examples` training examples or pairs: max_steps, when set, wins
    over one epoch and caps several."""
    batches_per_epoch = max(1, num_examples // config.batch_size)
    total = batches_per_epoch * config.num_epochs
    if config.max_steps:
        total = min(total, config.max_steps) if config.num_epochs > 1 else config.max_steps
    return batches_per_epoch, total


@dataclass
class PreparedData(Generic[Item]):
    """What SL and DPO prepare before a run exists: rendered training and held-out items, how many over-long ones
    were truncated or dropped, the renderer, and the training tokens."""

    train: list[Item]
    test: list[Item]
    truncated: int
    dropped: int
    renderer: str
    train_tokens: int
    items: ClassVar[str] = "examples"
    dropped_note: ClassVar[str] = "over-long examples dropped"

    def summary(self) -> str:
        parts = [
            f"{len(self.train)} training and {len(self.test)} held-out {self.items}",
            f"{self.train_tokens:,} training tokens",
            f"renderer {self.renderer}",
        ]
        if self.truncated:
            parts.append(f"{self.truncated} over-long {self.items} truncated")
        if self.dropped:
            parts.append(f"{self.dropped} {self.dropped_note}")
        return ", ".join(parts)


def data_plan(config: CommonConfig, prepared: PreparedData[Any]) -> LoopPlan:
    """The plan of a loop that steps through batches of data (SL, DPO): each step takes a batch of the average
    example's tokens."""
    num_examples = len(prepared.train)
    batches_per_epoch, total_steps = plan_steps(config, num_examples)
    tokens_per_example = prepared.train_tokens / max(1, num_examples)
    tokens = int(total_steps * min(config.batch_size, num_examples) * tokens_per_example)
    return LoopPlan(total_steps, batches_per_epoch, tokens)


def passes_note(config: CommonConfig, batches_per_epoch: int, total_steps: int) -> str:
    """How many passes over the training data `total_steps` make, said plainly ("1 pass", "1.5 passes"), and when
    max_steps makes that more or fewer than the Epochs setting, that it does."""
    passes = total_steps / batches_per_epoch
    text = f"{passes:.3g} pass{'' if passes == 1 else 'es'} over the data ({batches_per_epoch} steps each)"
    if abs(passes - config.num_epochs) > 1e-9:
        text += f", set by max_steps={config.max_steps}, not num_epochs={config.num_epochs}"
    return text


def batch_at(train: list[Item], config: CommonConfig, step: int, batches_per_epoch: int) -> list[Item]:
    """The batch of a step: a deterministic shuffle per epoch, so a resumed run sees the same order."""
    epoch, index = divmod(step, batches_per_epoch)
    order = list(range(len(train)))
    random.Random(config.seed * 100_003 + epoch).shuffle(order)
    size = min(config.batch_size, len(train))
    return [train[i] for i in order[index * size : (index + 1) * size]]
