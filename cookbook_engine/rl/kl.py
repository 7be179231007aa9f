"""Per-token advantages from a second model's log-probabilities: the RL KL penalty and on-policy distillation.

Both score the sampled tokens of each datum with another model (`compute_logprobs` on the full sequence, index 0
dropped) and add a per-token term to the datum's advantages, as tinker-cookbook does:

- `add_kl_penalty` (rl/metrics.py's incorporate_kl_penalty): the reference is the base model or a chosen checkpoint;
  with diff_t = sampler logprob_t - reference logprob_t, advantage_t += coef * (mean diff - diff_t). Tokens the
  policy likes much more than the reference are pushed down. Metric `kl_policy_base`: the mean diff over the
  batch's completion tokens (a sample estimate of KL[policy || reference]).
- `add_teacher_advantages` (distillation/train_on_policy.py's incorporate_kl_penalty): the teacher scores the
  student's tokens; advantage_t += -coef * (student logprob_t - teacher logprob_t), the negative per-token reverse
  KL. Metrics `teacher_kl` (mean reverse KL per token), `distill/teacher_logprob`, `distill/student_logprob`.

Only completion tokens count (the datum's mask); the prompt's advantages stay 0. The reference and the teacher are
sampling clients, so on the local backend the base model is the worker's own weights with the adapter disabled
(no second copy). Not here: which client is the reference (training/reference.py), the loops that call these.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tinker import types

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import SamplingClient


@dataclass
class ScoredTokens:
    """One datum's completion positions: the sampler's log-probs, the other model's, and the mask (all per target
    position, prompt positions masked out)."""

    sampled_T: np.ndarray
    other_T: np.ndarray
    mask_T: np.ndarray


async def score_with(client: SamplingClient, data_D: list[types.Datum]) -> list[ScoredTokens]:
    """The other model's log-prob of every target token of each datum (one compute_logprobs call per datum)."""

    async def one(datum: types.Datum) -> ScoredTokens:
        targets_T = datum.loss_fn_inputs["target_tokens"].to_numpy()
        full = types.ModelInput.from_ints(datum.model_input.to_ints() + [int(targets_T[-1])])
        logprobs = await client.compute_logprobs_async(full)
        other_T = np.array([0.0 if lp is None else lp for lp in logprobs[1:]], dtype=np.float32)
        mask_T = datum.loss_fn_inputs["mask"].to_numpy().astype(np.float32)
        sampled_T = datum.loss_fn_inputs["logprobs"].to_numpy().astype(np.float32)
        if len(other_T) != len(sampled_T):
            raise ValueError(f"scored {len(other_T)} positions for a datum of {len(sampled_T)} target tokens")
        return ScoredTokens(sampled_T, other_T * mask_T, mask_T)

    return list(await asyncio.gather(*[one(datum) for datum in data_D]))


def _add_to_advantages(datum: types.Datum, extra_T: np.ndarray) -> None:
    advantages_T = datum.loss_fn_inputs["advantages"].to_numpy().astype(np.float32)
    datum.loss_fn_inputs["advantages"] = types.TensorData(
        data=[float(x) for x in advantages_T + extra_T], dtype="float32"
    )


def _token_count(scored_D: list[ScoredTokens]) -> float:
    return float(sum(s.mask_T.sum() for s in scored_D))


async def add_kl_penalty(data_D: list[types.Datum], reference: SamplingClient, coef: float) -> dict[str, float]:
    """advantage_t += coef * (mean diff - diff_t), diff = sampler - reference log-prob; returns kl_policy_base."""
    if not data_D:
        return {}
    scored_D = await score_with(reference, data_D)
    diffs_D = [(s.sampled_T - s.other_T) * s.mask_T for s in scored_D]
    tokens = _token_count(scored_D)
    mean_diff = float(sum(d.sum() for d in diffs_D)) / tokens if tokens else 0.0
    for datum, scored, diff_T in zip(data_D, scored_D, diffs_D):
        _add_to_advantages(datum, coef * scored.mask_T * (mean_diff - diff_T))
    return {"kl_policy_base": mean_diff, "kl_penalty_coef": coef}


async def add_teacher_advantages(data_D: list[types.Datum], teacher: SamplingClient, coef: float) -> dict[str, float]:
    """advantage_t += -coef * (student - teacher log-prob); returns teacher_kl and both mean log-probs per token."""
    if not data_D:
        return {}
    scored_D = await score_with(teacher, data_D)
    tokens = _token_count(scored_D) or 1.0
    reverse_kl_D = [(s.sampled_T - s.other_T) * s.mask_T for s in scored_D]
    for datum, scored, reverse_kl_T in zip(data_D, scored_D, reverse_kl_D):
        _add_to_advantages(datum, -coef * scored.mask_T * reverse_kl_T)
    return {
        "teacher_kl": float(sum(r.sum() for r in reverse_kl_D)) / tokens,
        "distill/teacher_logprob": float(sum(s.other_T.sum() for s in scored_D)) / tokens,
        "distill/student_logprob": float(sum((s.sampled_T * s.mask_T).sum() for s in scored_D)) / tokens,
    }
