"""The shape every training loop shares (SL, DPO and RL): how long a run is (`LoopPlan`, which each loop's `plan()`
returns and the New run form's estimate reads), what SL and DPO prepare (`PreparedData`: rendered examples or
pairs), the record of a step in flight (`SubmittedBatch`), and what happens
around the steps (`LoopSkeleton`): the steps still to run, ending early when the run is cancelled; the evaluations
every `eval_every` steps and at the end; a checkpoint every `save_every` steps and a final one.

Not here: what a step does (each loop owns that), LR schedules and checkpoint files (common.py), the
evaluators (evals/).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from tinker import types

from cookbook_engine.config import CommonConfig, ConfigError
from cookbook_engine.evals.in_training import PeriodicEvals
from cookbook_engine.training.common import save_checkpoint

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import ResultFuture, TrainingClient
    from cookbook_engine.runs import RunContext


Item = TypeVar("Item")  # a training example (SL: a datum; DPO: a pair of datums)


def loop_module(kind: str) -> ModuleType:
    """The module of a run kind's loop, with its prepare(), plan() and train()."""
    if kind == "sl":
        from cookbook_engine.sl import loop as supervised

        return supervised
    if kind == "dpo":
        from cookbook_engine.dpo import loop as preference

        return preference
    if kind == "rl":
        from cookbook_engine.rl import loop

        return loop
    if kind == "distill":
        from cookbook_engine.distill import loop as distill

        return distill
    raise ConfigError(f"unknown run kind {kind!r}")


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


@dataclass
class SubmittedBatch:
    """A step in flight: its forward_backward and optim_step, queued and not yet awaited."""

    step: int
    fb_future: ResultFuture[types.ForwardBackwardOutput]
    optim_future: ResultFuture[types.OptimStepResponse]
    data: list[types.Datum]  # what forward_backward got
    learning_rate: float
    submitted_at: float  # time.perf_counter() when the step started
    metrics: dict[str, float] = field(default_factory=dict)  # measured before the step (its evaluations)

    async def results(self) -> tuple[types.ForwardBackwardOutput, types.OptimStepResponse]:
        return await self.fb_future, await self.optim_future


class StepClock:
    """time/step and time/total of a run whose steps may overlap (submitted ahead): a step's time runs from when the
    previous one finished, or from its own submission if later."""

    def __init__(self) -> None:
        self.started = self.last_done = time.perf_counter()

    def step_done(self, submitted_at: float) -> dict[str, float]:
        now = time.perf_counter()
        elapsed = now - max(submitted_at, self.last_done)
        self.last_done = now
        return {"time/step": elapsed, "time/total": now - self.started}


def step_metrics(
    submitted: SubmittedBatch, optim: types.OptimStepResponse, plan: LoopPlan, clock: StepClock
) -> dict[str, float]:
    """What SL and DPO log for every finished step besides their loss: rate, epoch, progress, times, grad norm."""
    metrics = {
        "learning_rate": submitted.learning_rate,
        "epoch": submitted.step // plan.batches_per_epoch,
        "progress": (submitted.step + 1) / plan.total_steps,
        **clock.step_done(submitted.submitted_at),
    }
    if optim.metrics and "grad_norm" in optim.metrics:
        metrics["optim/grad_norm"] = optim.metrics["grad_norm"]
    return metrics


class LoopSkeleton:
    """Around the steps of one run: `steps()` to iterate, `evaluations_due()` before a step, `save_due()` and
    `save()` after one, `finish()` at the end (final evaluation unless cancelled, final checkpoint)."""

    def __init__(
        self,
        config: CommonConfig,
        ctx: RunContext,
        client: TrainingClient,
        plan: LoopPlan,
        start_step: int,
        evals: PeriodicEvals,
    ):
        self.config, self.ctx, self.client, self.plan, self.evals = config, ctx, client, plan, evals
        self.start_step = start_step
        self.stopped_at = start_step  # where the steps ended: the plan's end, or the step a cancel came before

    @property
    def total_steps(self) -> int:
        return self.plan.total_steps

    def start(self, summary: str, *notes: str) -> None:
        """The run's first log lines (saying where a resumed run continues) and its progress so far."""
        self.ctx.note(summary + (f"; resuming at step {self.start_step}" if self.start_step else ""))
        for note in notes:
            self.ctx.note(note)
        self.ctx.progress(self.start_step, self.total_steps)

    def steps(self) -> Iterator[int]:
        """The steps still to run, ending before the next one once the run is cancelled."""
        for step in range(self.start_step, self.total_steps):
            if self.ctx.cancelled():
                self.stopped_at = step
                return
            yield step
        self.stopped_at = self.total_steps

    async def evaluations_due(self, step: int, client: Any) -> dict[str, float]:
        """The periodic evaluations on `client` (the weights after `step` steps) when `step` is due, else none."""
        if self.config.eval_every and step % self.config.eval_every == 0 and self.evals:
            return await self.evals(client)
        return {}

    def save_due(self, done: int) -> bool:
        """Whether a periodic checkpoint follows `done` steps (the last step gets the final one instead)."""
        return bool(self.config.save_every) and done % self.config.save_every == 0 and done < self.total_steps

    async def save(self, done: int, *, final: bool = False) -> None:
        name = "final" if final and done == self.total_steps else f"{done:06d}"
        loop_state: dict[str, Any] = {"batch": done, "epoch": done // self.plan.batches_per_epoch}
        await save_checkpoint(self.client, self.ctx, step=done, name=name, loop_state=loop_state, final=final)

    async def finish(self, eval_client: Any) -> int:
        """After the steps: the final evaluation on `eval_client` (not when cancelled) and the final checkpoint;
        returns the steps completed."""
        completed = self.stopped_at if self.ctx.cancelled() else self.total_steps
        if not self.ctx.cancelled() and self.evals:
            self.ctx.logger.log_metrics(self.total_steps, await self.evals(eval_client))
        await self.save(completed, final=True)
        self.ctx.note(f"saved step {completed} of {self.total_steps}")
        return completed
