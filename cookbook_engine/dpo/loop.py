"""Direct Preference Optimization (DPO), mirroring tinker-cookbook's preference/train_dpo.py.

`prepare()` loads and validates preference pairs (prompt or conversation, chosen, rejected) and renders each side as
one datum: the prompt plus that side's continuation, with loss weights on the continuation's assistant messages only
(fitted to max_length; a pair with a side left with nothing to score is dropped and counted). All input checks run
there, before a run exists.

`train()` is the loop. The reference model is the base model (the adapter disabled, on the local backend) or, when
the run starts from a checkpoint, that checkpoint's weights; it never changes during the run, even when resuming.
Reference log-probs are computed once per pair, at first use, through a sampling client's `compute_logprobs`, and
cached. Each step sends the batch's chosen and rejected datums interleaved to `forward_backward_custom` with

    loss = mean over pairs of -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))

where pi and ref are sums of token log-probs over the scored tokens, plus, when `rpo_alpha` > 0, rpo_alpha times the
chosen sides' mean cross-entropy per scored token (TRL's rpo_alpha, "DPO + NLL": it keeps the chosen replies likely,
where plain DPO lowers both sides and the model drifts to replies neither side had); metrics dpo_loss, chosen_nll,
accuracy (share of pairs with (pi_c - ref_c) > (pi_r - ref_r) by more than TIE_TOLERANCE: strict, as TRL and
tinker-cookbook count it), ties (share within TIE_TOLERANCE: all of them at the start, when the policy is the
reference, so accuracy starts at 0), margin, chosen_reward and rejected_reward (beta times the log-ratios), and
test/ versions on held-out pairs every `eval_every` steps (through `forward`, no gradient). `plan()` says how many
steps a run takes, as in sl/loop.py; the loop's frame (evaluations, checkpoints, resume, the end) is
training/skeleton.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from tinker import types

from cookbook_engine.config import DPOConfig
from cookbook_engine.dpo.data import TIE_TOLERANCE, PairDatums, PreparedDPO, prepare
from cookbook_engine.evals.in_training import NamedEvals, PeriodicEvals
from cookbook_engine.training import anchor as anchoring, lora_a, reference
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
    step_metrics,
)

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import SamplingClient, ServiceClient, TrainingClient
    from cookbook_engine.training.context import RunContext

EVAL_BATCH_PAIRS = 16


def plan(config: DPOConfig, prepared: PreparedDPO) -> LoopPlan:
    """The steps this run takes (epochs of batches of pairs, max_steps) and the training tokens (both sides)."""
    return data_plan(config, prepared)


# ------------------------------------------------------------------------------------------------ the math


def weighted_sum(datum: types.Datum, logprobs_T: torch.Tensor) -> torch.Tensor:
    """Sum of token log-probs over the scored tokens of a datum (its weights)."""
    return (logprobs_T.float() * datum.loss_fn_inputs["weights"].to_torch().float()).sum()


def dpo_loss(
    chosen_P: torch.Tensor,
    rejected_P: torch.Tensor,
    chosen_ref_P: torch.Tensor,
    rejected_ref_P: torch.Tensor,
    beta: float,
    chosen_tokens_P: torch.Tensor | None = None,
    rpo_alpha: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The DPO loss (mean over pairs) and its metrics, from summed log-probs of each side under policy and reference;
    with the chosen sides' scored-token counts, their mean cross-entropy per token too (chosen_nll), added to the
    loss times rpo_alpha."""
    chosen_ratio_P = chosen_P - chosen_ref_P
    rejected_ratio_P = rejected_P - rejected_ref_P
    dpo = -F.logsigmoid(beta * (chosen_ratio_P - rejected_ratio_P)).mean()
    nll = (-chosen_P / chosen_tokens_P.clamp(min=1)).mean() if chosen_tokens_P is not None else None
    loss = dpo + rpo_alpha * nll if nll is not None and rpo_alpha else dpo
    chosen_reward_P = beta * chosen_ratio_P.detach()
    rejected_reward_P = beta * rejected_ratio_P.detach()
    difference_P = chosen_ratio_P.detach() - rejected_ratio_P.detach()
    right_P = (difference_P > TIE_TOLERANCE).float()
    tie_P = (difference_P.abs() <= TIE_TOLERANCE).float()
    metrics = {
        "dpo_loss": float(dpo.detach()),
        "accuracy": float(right_P.mean()),
        "ties": float(tie_P.mean()),
        "margin": float((chosen_reward_P - rejected_reward_P).mean()),
        "chosen_reward": float(chosen_reward_P.mean()),
        "rejected_reward": float(rejected_reward_P.mean()),
    }
    if nll is not None:
        metrics["chosen_nll"] = float(nll.detach())
    return loss, metrics


def interleave(pairs: list[PairDatums]) -> list[types.Datum]:
    return [datum for pair in pairs for datum in (pair.chosen, pair.rejected)]


def scored_tokens(datum: types.Datum) -> float:
    """How many tokens of a datum are scored (the sum of its weights)."""
    return float(datum.loss_fn_inputs["weights"].to_torch().float().sum())


def make_loss_fn(reference_P: list[tuple[float, float]], beta: float, rpo_alpha: float = 0.0) -> Callable[..., Any]:
    """The forward_backward_custom loss for interleaved (chosen, rejected) data."""
    chosen_ref_P = torch.tensor([ref[0] for ref in reference_P])
    rejected_ref_P = torch.tensor([ref[1] for ref in reference_P])

    def loss_fn(data: list[types.Datum], logprobs_D: list[torch.Tensor]):
        sums_D = [weighted_sum(datum, logprobs) for datum, logprobs in zip(data, logprobs_D)]
        chosen_tokens_P = torch.tensor([scored_tokens(datum) for datum in data[0::2]])
        chosen_P, rejected_P = torch.stack(sums_D[0::2]), torch.stack(sums_D[1::2])
        return dpo_loss(chosen_P, rejected_P, chosen_ref_P, rejected_ref_P, beta, chosen_tokens_P, rpo_alpha)

    return loss_fn


# ------------------------------------------------------------------------------------------------ reference


def reference_sampling_client(service: ServiceClient, config: DPOConfig, store: Any = None) -> SamplingClient:
    """The fixed reference: the checkpoint the run started from, else the base model."""
    return reference.sampling_client_for(service, config.model, config.start_checkpoint, store)


class ReferenceLogprobs:
    """Summed reference log-probs of each pair's sides, computed at first use and kept for the run."""

    def __init__(self, sampling_client: SamplingClient):
        self.client = sampling_client
        self._cache: dict[int, tuple[float, float]] = {}

    async def _side(self, datum: types.Datum) -> float:
        targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
        full = types.ModelInput.from_ints(datum.model_input.to_ints() + [int(targets[-1])])
        logprobs = await self.client.compute_logprobs_async(full)
        return float(weighted_sum(datum, torch.tensor(logprobs[1:], dtype=torch.float32)))

    async def for_pairs(self, pairs: list[PairDatums]) -> list[tuple[float, float]]:
        missing = [pair for pair in pairs if id(pair) not in self._cache]
        sums = await asyncio.gather(*[self._side(d) for pair in missing for d in (pair.chosen, pair.rejected)])
        for index, pair in enumerate(missing):
            self._cache[id(pair)] = (sums[2 * index], sums[2 * index + 1])
        return [self._cache[id(pair)] for pair in pairs]


# ------------------------------------------------------------------------------------------------ the loop


async def evaluate(
    client: TrainingClient, reference: ReferenceLogprobs, test: list[PairDatums], beta: float
) -> dict[str, float]:
    """test/dpo_loss, test/accuracy, ... on held-out pairs, with the current weights and no gradient."""
    policy_P: list[tuple[float, float]] = []
    for start in range(0, len(test), EVAL_BATCH_PAIRS):
        chunk = test[start : start + EVAL_BATCH_PAIRS]
        data = interleave(chunk)
        output = await (await client.forward_async(data, "cross_entropy"))
        sums = [float(weighted_sum(d, out["logprobs"].to_torch())) for d, out in zip(data, output.loss_fn_outputs)]
        policy_P += list(zip(sums[0::2], sums[1::2]))
    reference_P = await reference.for_pairs(test)
    _, metrics = dpo_loss(
        torch.tensor([p[0] for p in policy_P]),
        torch.tensor([p[1] for p in policy_P]),
        torch.tensor([r[0] for r in reference_P]),
        torch.tensor([r[1] for r in reference_P]),
        beta,
        torch.tensor([scored_tokens(pair.chosen) for pair in test]),
    )
    return {f"test/{key}": value for key, value in metrics.items()}


def held_out_evals(config: DPOConfig, prepared: PreparedDPO, reference: ReferenceLogprobs) -> PeriodicEvals:
    """test/dpo_loss, test/accuracy, ... on the held-out pairs (when there are any) and the named eval sets (evals=...:
    test/<set>/<metric>), at the same points."""
    test = prepared.test
    return PeriodicEvals(
        (lambda client: evaluate(client, reference, test, config.dpo_beta)) if test else None,
        NamedEvals.for_config(config),
    )


async def submit(
    client: TrainingClient,
    config: DPOConfig,
    step: int,
    pairs: list[PairDatums],
    reference: ReferenceLogprobs,
    lr: float,
    metrics: dict[str, float],
    anchor: Anchor | None = None,
) -> SubmittedBatch:
    """A step's reference log-probs (first use of its pairs), then its forward_backward (and its anchor's) and
    optim_step queued."""
    started = time.perf_counter()
    reference_P = await reference.for_pairs(pairs)
    data = interleave(pairs)
    loss_fn = make_loss_fn(reference_P, config.dpo_beta, config.rpo_alpha)
    fb_future = await client.forward_backward_custom_async(data, loss_fn)
    anchor_pass = await anchoring.submit(client, anchor)
    optim_future = await client.optim_step_async(adam_params(config, lr))
    return SubmittedBatch(step, fb_future, optim_future, data, lr, started, metrics, anchor_pass)


async def log_finished(ctx: RunContext, submitted: SubmittedBatch, plan: LoopPlan, clock: StepClock) -> None:
    """Await a submitted step and log its metrics after the evaluations measured before it."""
    output, optim = await submitted.results()
    metrics = dict(submitted.metrics)
    metrics.update({key: value for key, value in (output.metrics or {}).items() if ":" not in key})
    metrics.update(
        {"num_pairs": len(submitted.data) // 2, "num_tokens": sum(d.model_input.length for d in submitted.data)}
    )
    metrics.update(step_metrics(submitted, optim, plan, clock))
    metrics.update(await submitted.anchor_metrics())
    ctx.logger.log_metrics(submitted.step, metrics)
    ctx.progress(submitted.step + 1, plan.total_steps)


async def train(config: DPOConfig, ctx: RunContext, prepared: PreparedDPO | None = None) -> None:
    prepared = prepared or prepare(config)
    service, client, start_step = start_training_client(config, ctx.resume, ctx)
    fixed_note = await lora_a.fix_for_run(config, client, ctx.resume is not None)
    anchor = await anchoring.build(config, service, start_step)
    reference = ReferenceLogprobs(reference_sampling_client(service, config, getattr(ctx, "store", None)))
    base_lr = learning_rate(config)
    run_plan = plan(config, prepared)
    loop = LoopSkeleton(config, ctx, client, run_plan, start_step, held_out_evals(config, prepared, reference))
    rpo = f", rpo_alpha {config.rpo_alpha:g}" if config.rpo_alpha else ""
    loop.start(
        f"DPO on {config.model}: {prepared.summary()}; {run_plan.total_steps} steps of {config.batch_size} "
        f"pairs = {passes_note(config, run_plan.batches_per_epoch, run_plan.total_steps)}, "
        f"beta {config.dpo_beta:g}{rpo}, lr {base_lr:g} ({config.lr_schedule}), LoRA rank "
        f"{lora_a.rank_note(config)}; reference "
        f"{config.start_checkpoint or 'the base model'}{anchoring.describe(anchor, config)}",
        *([fixed_note] if fixed_note else []),
    )
    clock = StepClock()
    for step in loop.steps():
        metrics = await loop.evaluations_due(step, client)
        pairs = batch_at(prepared.train, config, step, run_plan.batches_per_epoch)
        lr = base_lr * lr_multiplier(config.lr_schedule, step, run_plan.total_steps)
        submitted = await submit(client, config, step, pairs, reference, lr, metrics, anchor)
        await log_finished(ctx, submitted, run_plan, clock)
        if loop.save_due(step + 1):
            await loop.save(step + 1)
    await loop.finish(client)
