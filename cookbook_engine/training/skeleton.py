"""The frame every training loop shares (SL, DPO and RL): the record of a step in flight (`SubmittedBatch`), step
times (`StepClock`, `step_metrics`) and what happens around the steps (`LoopSkeleton`): the steps still to run,
ending early when the run is cancelled; the evaluations every `eval_every` steps and at the end; a checkpoint every
`save_every` steps and a final one. How long a run is (`LoopPlan`, `PreparedData`, `batch_at`) is plan.py's,
re-exported here.

Not here: what a step does (each loop owns that), LR schedules and checkpoint files (common.py), the evaluators
(evals/), which module runs a kind (runs.loop_module).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinker import types

from cookbook_engine.config import CommonConfig
from cookbook_engine.evals.in_training import PeriodicEvals
from cookbook_engine.training.common import save_checkpoint
from cookbook_engine.training.plan import (  # re-exported: the loops, the form and the tests plan with these
    Item as Item,
    LoopPlan as LoopPlan,
    PreparedData as PreparedData,
    batch_at as batch_at,
    data_plan as data_plan,
    passes_note as passes_note,
    plan_steps as plan_steps,
)

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import ResultFuture, TrainingClient
    from cookbook_engine.training.context import RunContext


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
    anchor_pass: Any = None  # the step's anchor forward_backward (training/anchor.py), when the run has an anchor

    async def anchor_metrics(self) -> dict[str, float]:
        return await self.anchor_pass.metrics() if self.anchor_pass is not None else {}

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
