"""Supervised fine-tuning (SL), mirroring tinker-cookbook's supervised/train.py.

`prepare()` loads and validates the chat dataset, renders every conversation to tokens and loss weights
(TrainOnWhat), fits them to max_length (truncating or dropping, with counts) and builds datums: all the checks that
can fail on bad input run here, before a run exists. `train()` is the loop: batches are submitted ahead (the next
step's forward_backward and optim_step are queued before the previous step's results are awaited), the learning
rate follows a linear / cosine / constant schedule, test NLL is computed every `eval_every` steps, the state is
saved every `save_every` steps and at the end, and a resumed run continues at its checkpoint's batch. `plan()` says
how many steps that is (the New run form's estimate reads it). The loop's frame (evaluations, checkpoints, the end)
is training/skeleton.py's, shared with DPO and RL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tinker import types

from cookbook_engine.config import CommonConfig, SLConfig
from cookbook_engine.evals.in_training import NamedEvals, PeriodicEvals
from cookbook_engine.sl.data import (  # re-exported: tests render with it
    PreparedSL,
    prepare,
    render_examples as render_examples,
)
from cookbook_engine.training import anchor as anchoring, lora_a
from cookbook_engine.training.anchor import Anchor
from cookbook_engine.training.common import (
    adam_params,
    lr_multiplier,
    start_training_client,
)
from cookbook_engine.training.learning_rate import learning_rate
from cookbook_engine.training.skeleton import (
    LoopPlan,
    LoopSkeleton,
    StepClock,
    SubmittedBatch,
    batch_at,
    data_plan,
    passes_note,
    plan_steps as plan_steps,  # re-exported: tests and benchmarks plan with it
    step_metrics,
)

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import TrainingClient
    from cookbook_engine.training.context import RunContext


def plan(config: SLConfig, prepared: PreparedSL) -> LoopPlan:
    """The steps this run takes (epochs of batches, max_steps) and the training tokens they process."""
    return data_plan(config, prepared)


def weighted_nll(data: list[types.Datum], output: types.ForwardBackwardOutput) -> tuple[float, float]:
    """(sum of -logprob * weight, sum of weights) over a batch."""
    total, weight_sum = 0.0, 0.0
    for datum, out in zip(data, output.loss_fn_outputs):
        weights = datum.loss_fn_inputs["weights"].to_numpy()
        total += float(-(out["logprobs"].to_numpy() * weights).sum())
        weight_sum += float(weights.sum())
    return total, weight_sum


async def evaluate(client: TrainingClient, test: list[types.Datum], batch_size: int = 16) -> dict[str, float]:
    """test/nll: the weighted mean NLL of the held-out examples on `client`'s weights (no gradient)."""
    futures = [
        await client.forward_async(test[i : i + batch_size], "cross_entropy") for i in range(0, len(test), batch_size)
    ]
    total, weight_sum = 0.0, 0.0
    for start, future in zip(range(0, len(test), batch_size), futures):
        nll, weights = weighted_nll(test[start : start + batch_size], await future)
        total, weight_sum = total + nll, weight_sum + weights
    return {"test/nll": total / max(weight_sum, 1e-9)}


# More metrics from a finished step's batch and its forward_backward output, added to `metrics` in place (prompt
# distillation's teacher_kl, a mix's per-dataset train NLL).
Derive = Callable[[list[types.Datum], types.ForwardBackwardOutput, dict[str, float]], None]


def held_out_evals(config: SLConfig, prepared: PreparedSL) -> PeriodicEvals:
    """test/nll on the held-out examples (when there are any), each mixed dataset's test/<name>/nll, and the named
    eval sets (evals=...: test/<set>/<metric>), at the same points."""
    if not prepared.test:
        return PeriodicEvals(None, NamedEvals.for_config(config))

    async def held_out(client: TrainingClient) -> dict[str, float]:
        metrics = await evaluate(client, prepared.test)
        for task in prepared.tasks:
            if task.test:
                metrics[f"test/{task.name}/nll"] = (await evaluate(client, task.test))["test/nll"]
        return metrics

    return PeriodicEvals(held_out, NamedEvals.for_config(config))


def per_task_nll(task_of: dict[int, str]) -> Derive:
    """train/<name>/nll of each mixed dataset in a finished step's batch."""

    def derive(data: list[types.Datum], output: types.ForwardBackwardOutput, metrics: dict[str, float]) -> None:
        sums: dict[str, list[float]] = {}
        for datum, out in zip(data, output.loss_fn_outputs):
            weights = datum.loss_fn_inputs["weights"].to_numpy()
            nll_and_weight = sums.setdefault(task_of.get(id(datum), ""), [0.0, 0.0])
            nll_and_weight[0] += float(-(out["logprobs"].to_numpy() * weights).sum())
            nll_and_weight[1] += float(weights.sum())
        for name, (nll, weight) in sums.items():
            if name and weight:
                metrics[f"train/{name}/nll"] = nll / weight

    return derive


async def submit(
    client: TrainingClient,
    config: CommonConfig,
    step: int,
    batch: list[types.Datum],
    lr: float,
    metrics: dict[str, float],
    anchor: Anchor | None = None,
) -> SubmittedBatch:
    """Queue a step's forward_backward (and its anchor's) and optim_step without awaiting them."""
    submitted = time.perf_counter()
    fb_future = await client.forward_backward_async(batch, "cross_entropy")
    anchor_pass = await anchoring.submit(client, anchor)
    optim_future = await client.optim_step_async(adam_params(config, lr))
    return SubmittedBatch(step, fb_future, optim_future, batch, lr, submitted, metrics, anchor_pass)


async def log_finished(
    ctx: RunContext, submitted: SubmittedBatch, plan: LoopPlan, clock: StepClock, derive: Derive | None = None
) -> None:
    """Await a submitted step and log its metrics (with the evaluations measured before it)."""
    output, optim = await submitted.results()
    nll, weight_sum = weighted_nll(submitted.data, output)
    common = step_metrics(submitted, optim, plan, clock)
    num_tokens = sum(d.model_input.length for d in submitted.data)
    metrics = {
        "train_mean_nll": nll / max(weight_sum, 1e-9),
        "num_tokens": num_tokens,
        "num_loss_tokens": weight_sum,
        "num_sequences": len(submitted.data),
        **common,
        "throughput/tokens_per_s": num_tokens / max(common["time/step"], 1e-9),
        **submitted.metrics,
        **await submitted.anchor_metrics(),
    }
    if derive is not None:
        derive(submitted.data, output, metrics)
    ctx.logger.log_metrics(submitted.step, metrics)
    ctx.progress(submitted.step + 1, plan.total_steps)


async def train(config: SLConfig, ctx: RunContext, prepared: PreparedSL | None = None) -> None:
    prepared = prepared or prepare(config)
    service, client, start_step = start_training_client(config, ctx.resume, ctx)
    fixed_note = await lora_a.fix_for_run(config, client, ctx.resume is not None)
    anchor = await anchoring.build(config, service, start_step)
    base_lr = learning_rate(config)
    run_plan = plan(config, prepared)
    loop = LoopSkeleton(config, ctx, client, run_plan, start_step, held_out_evals(config, prepared))
    loop.start(
        f"SL on {config.model}: {prepared.summary()}; {run_plan.total_steps} steps of {config.batch_size} = "
        f"{passes_note(config, run_plan.batches_per_epoch, run_plan.total_steps)}, "
        f"lr {base_lr:g} ({config.lr_schedule}), LoRA rank {lora_a.rank_note(config)}"
        f"{anchoring.describe(anchor, config)}",
        *([fixed_note] if fixed_note else []),
    )
    derive = per_task_nll(prepared.task_of) if prepared.tasks else None
    await run_steps(config, ctx, client, loop, prepared.train, base_lr, derive, anchor)


async def run_steps(
    config: CommonConfig,
    ctx: RunContext,
    client: TrainingClient,
    loop: LoopSkeleton,
    train_data: list[types.Datum],
    base_lr: float,
    derive: Derive | None = None,
    anchor: Anchor | None = None,
) -> None:
    """The supervised steps of `loop`'s plan over `train_data` (SL, and prompt distillation on the teacher's
    replies): each batch queued before the previous step's results are awaited, checkpoints, the final evaluation."""
    run_plan = loop.plan
    clock = StepClock()
    pending: SubmittedBatch | None = None
    for step in loop.steps():
        metrics = await loop.evaluations_due(step, client)  # weights after `step` steps, before this batch
        batch = batch_at(train_data, config, step, run_plan.batches_per_epoch)
        lr = base_lr * lr_multiplier(config.lr_schedule, step, run_plan.total_steps)
        submitted = await submit(client, config, step, batch, lr, metrics, anchor)
        if pending is not None:
            await log_finished(ctx, pending, run_plan, clock, derive)  # the previous step's, this one already queued
        pending = submitted
        if loop.save_due(step + 1):
            await log_finished(ctx, pending, run_plan, clock, derive)
            pending = None
            await loop.save(step + 1)
    if pending is not None:
        await log_finished(ctx, pending, run_plan, clock, derive)
    await loop.finish(client)
