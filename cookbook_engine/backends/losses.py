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
- stable_reinforce (the LOCAL definition; the hosted service's exact formula is unpublished): a REINFORCE objective
  with a truncated importance weight to the RECORDED sampler: over the sampled target positions only (sampled_mask,
  from the datum's provenance), with mu = the sampler log-probs recorded when the sequence was sampled,
  r = exp(logprobs - mu) and w = sg(clip(r, clip_low_threshold, clip_high_threshold)) (defaults 0 and 2: truncated
  IS, no lower bound), loss = -sum(mask * w * A * logprobs) + kl_coeff * sum(mask * (r - 1 - log r)) (kl_coeff
  default 0; r - 1 - log r is the k3 estimate of KL(sampler || policy)). On-policy (r = 1) its gradient is plain
  REINFORCE's, -sum(A * grad logprobs); off-policy each token's weight is capped at clip_high_threshold.
  stability.py supplies mu and the mask after checking the provenance against the records.
Config defaults where Tinker's docs name none: clip thresholds 0.8 / 1.2 (ratio bounds), dro beta 0.05 (the docs'
example value). `custom` names losses created with `create_custom_loss` (run by forward_backward_custom): it raises a
clear error here. This module is math only: no model, no batching.
"""

from __future__ import annotations

import torch

PPO_DEFAULT_CLIP_LOW = 0.8
PPO_DEFAULT_CLIP_HIGH = 1.2
DRO_DEFAULT_BETA = 0.05
STABLE_REINFORCE_CLIP_LOW = 0.0
STABLE_REINFORCE_CLIP_HIGH = 2.0

RL_INPUTS = ("target_tokens", "logprobs", "advantages")
REQUIRED_INPUTS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": RL_INPUTS,
    "ppo": RL_INPUTS,
    "cispo": RL_INPUTS,
    "dro": RL_INPUTS,
    "gspo": RL_INPUTS + ("sequence_ratio_mask",),
    "stable_reinforce": ("target_tokens", "advantages"),  # sampler log-probs come from the sampling records
}
UNSUPPORTED = {
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
    if loss_fn == "stable_reinforce":
        return _stable_reinforce(logprobs_T, sampler_T, advantages_T, inputs["sampled_mask"], config)
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


def _stable_reinforce(
    logprobs_T: torch.Tensor, sampler_T: torch.Tensor, advantages_T: torch.Tensor, mask_T: torch.Tensor, config: dict
) -> torch.Tensor:
    mask_T = mask_T.to(logprobs_T.dtype)
    low = float(config.get("clip_low_threshold", STABLE_REINFORCE_CLIP_LOW))
    high = float(config.get("clip_high_threshold", STABLE_REINFORCE_CLIP_HIGH))
    log_ratio_T = (logprobs_T - sampler_T) * mask_T
    weight_T = torch.clamp(torch.exp(log_ratio_T.detach()), low, high)
    loss = -(mask_T * weight_T * advantages_T * logprobs_T).sum()
    kl_coeff = float(config.get("kl_coeff", 0.0))
    if kl_coeff:
        loss = loss + kl_coeff * (mask_T * (torch.exp(log_ratio_T) - 1 - log_ratio_T)).sum()
    return loss


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
    target_shape = _shape(inputs["target_tokens"]) if "target_tokens" in inputs else ()
    if len(target_shape) == 2:  # top-K targets (N, K): cross_entropy only, with weights of the same shape
        if loss_fn != "cross_entropy":
            raise ValueError(
                f"datum {index}: target_tokens of shape {target_shape} (top-K) work with cross_entropy only"
            )
        if _shape(inputs["weights"]) != target_shape:
            raise ValueError(
                f"datum {index}: weights of shape {_shape(inputs['weights'])} for target_tokens of shape {target_shape}"
            )
    elif len(target_shape) > 2:
        raise ValueError(f"datum {index}: target_tokens must have shape (N,) or (N, K), got {target_shape}")


def _shape(value) -> tuple[int, ...]:
    return (
        tuple(value.to_numpy().shape) if hasattr(value, "to_numpy") else tuple(getattr(value, "shape", (len(value),)))
    )
