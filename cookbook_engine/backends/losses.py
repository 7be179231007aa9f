"""The built-in per-token losses of the tinker SDK (`LossFnType`), computed on one datum's log-probabilities.

Each returns the datum's loss **summed** over tokens (the SDK sums, it does not average) from the trainer's
log-probabilities of the target tokens (`logprobs_T`) and the datum's `loss_fn_inputs` as torch tensors, following
the formulas on Tinker's loss pages (ratio = exp(logprobs - sampler_logprobs), A = advantages, sg = stop-gradient):
- cross_entropy: -sum(weights * logprobs)
- importance_sampling: -sum(ratio * A)
- ppo: -sum(min(ratio * A, clip(ratio, low, high) * A))
- cispo: -sum(sg(clip(ratio, low, high)) * logprobs * A)
- dro: -sum(logprobs * A - beta / 2 * (logprobs - sampler_logprobs) ** 2)
- gspo (GSPO-token): s = exp(mean over sequence_ratio_mask of sg(logprobs) - sampler_logprobs); each token's ratio is
  s * exp(logprobs - sg(logprobs)) (s's value, its own gradient); then PPO's clipped objective on that ratio.
Config defaults where Tinker's docs name none: clip thresholds 0.8 / 1.2 (ratio bounds), dro beta 0.05 (the docs'
example value). `stable_reinforce` (alpha at Tinker) depends on sampling records the service keeps and its formula
is not published, and `custom` names losses created with `create_custom_loss` (run by forward_backward_custom):
both raise a clear error here. This module is math only: no model, no batching.
"""

from __future__ import annotations

import torch

PPO_DEFAULT_CLIP_LOW = 0.8
PPO_DEFAULT_CLIP_HIGH = 1.2
DRO_DEFAULT_BETA = 0.05

RL_INPUTS = ("target_tokens", "logprobs", "advantages")
REQUIRED_INPUTS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": RL_INPUTS,
    "ppo": RL_INPUTS,
    "cispo": RL_INPUTS,
    "dro": RL_INPUTS,
    "gspo": RL_INPUTS + ("sequence_ratio_mask",),
}
UNSUPPORTED = {
    "stable_reinforce": "stable_reinforce is Tinker's alpha loss: it needs the sampling records the hosted service "
    "keeps (record_stability_info) and its formula is not published, so the local backend cannot "
    "compute it. Use importance_sampling, ppo, cispo, gspo or dro (e.g. rl_loop's loss_fn=cispo).",
    "custom": "loss_fn='custom' runs a loss made by create_custom_loss; pass that handle (or a callable) to "
    "forward_backward_custom instead.",
}


def datum_loss(
    loss_fn: str, logprobs_T: torch.Tensor, inputs: dict[str, torch.Tensor], config: dict | None = None
) -> torch.Tensor:
    config = config or {}
    check_known(loss_fn)
    if loss_fn == "cross_entropy":
        return -(inputs["weights"] * logprobs_T).sum()
    sampler_T, advantages_T = inputs["logprobs"].to(logprobs_T.dtype), inputs["advantages"].to(logprobs_T.dtype)
    if loss_fn == "dro":
        beta = float(config.get("beta", DRO_DEFAULT_BETA))
        return -(logprobs_T * advantages_T - 0.5 * beta * (logprobs_T - sampler_T) ** 2).sum()
    low = float(config.get("clip_low_threshold", PPO_DEFAULT_CLIP_LOW))
    high = float(config.get("clip_high_threshold", PPO_DEFAULT_CLIP_HIGH))
    if loss_fn == "gspo":
        ratio_T = _gspo_ratio(logprobs_T, sampler_T, inputs["sequence_ratio_mask"])
    else:
        ratio_T = torch.exp(logprobs_T - sampler_T)
    if loss_fn == "importance_sampling":
        return -(ratio_T * advantages_T).sum()
    if loss_fn == "cispo":
        return -(torch.clamp(ratio_T, low, high).detach() * logprobs_T * advantages_T).sum()
    clipped_T = torch.clamp(ratio_T, low, high)  # ppo and gspo
    return -torch.minimum(ratio_T * advantages_T, clipped_T * advantages_T).sum()


def _gspo_ratio(logprobs_T: torch.Tensor, sampler_T: torch.Tensor, mask_T: torch.Tensor) -> torch.Tensor:
    in_ratio = mask_T != 0
    if not bool(in_ratio.any()):
        raise ValueError("gspo: sequence_ratio_mask marks no token, so the sequence ratio is undefined")
    log_ratio = (logprobs_T.detach() - sampler_T)[in_ratio].mean()
    return torch.exp(log_ratio + logprobs_T - logprobs_T.detach())


def check_known(loss_fn: str) -> None:
    if loss_fn in UNSUPPORTED:
        raise NotImplementedError(f"loss_fn {loss_fn!r}: {UNSUPPORTED[loss_fn]}")
    if loss_fn not in REQUIRED_INPUTS:
        raise ValueError(f"loss_fn {loss_fn!r} is unknown; choose one of {', '.join(REQUIRED_INPUTS)}")


def check_inputs(loss_fn: str, index: int, inputs: dict, length: int) -> None:
    """A clear error when a datum lacks an input its loss needs or has one of the wrong length."""
    check_known(loss_fn)
    for key in REQUIRED_INPUTS[loss_fn]:
        if key not in inputs:
            raise ValueError(f"datum {index}: loss {loss_fn} needs loss_fn_inputs[{key!r}]")
    for key, value in inputs.items():
        entries = len(value.to_numpy()) if hasattr(value, "to_numpy") else len(value)
        if entries != length:
            raise ValueError(
                f"datum {index}: loss_fn_inputs[{key!r}] has {entries} entries, model_input has {length} tokens"
            )
