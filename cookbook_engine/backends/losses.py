"""The built-in per-token losses of the tinker SDK, computed on one datum's log-probabilities.

Each returns the datum's loss **summed** over tokens (the SDK sums, it does not average) from the trainer's
log-probabilities of the target tokens and the datum's `loss_fn_inputs` as torch tensors:
- cross_entropy: -sum(weights * logprobs)
- importance_sampling: -sum(exp(logprobs - sampler_logprobs) * advantages)
- ppo: -sum(min(ratio * A, clip(ratio, clip_low, clip_high) * A)), ratio = exp(logprobs - sampler_logprobs)
This module is math only: no model, no batching.
"""

from __future__ import annotations

import torch

PPO_DEFAULT_CLIP_LOW = 0.8
PPO_DEFAULT_CLIP_HIGH = 1.2

REQUIRED_INPUTS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
}


def datum_loss(loss_fn: str, logprobs_T: torch.Tensor, inputs: dict[str, torch.Tensor],
               config: dict | None = None) -> torch.Tensor:
    config = config or {}
    if loss_fn == "cross_entropy":
        return -(inputs["weights"] * logprobs_T).sum()
    ratio_T = torch.exp(logprobs_T - inputs["logprobs"])
    advantages_T = inputs["advantages"]
    if loss_fn == "importance_sampling":
        return -(ratio_T * advantages_T).sum()
    if loss_fn == "ppo":
        low = float(config.get("clip_low_threshold", PPO_DEFAULT_CLIP_LOW))
        high = float(config.get("clip_high_threshold", PPO_DEFAULT_CLIP_HIGH))
        clipped_T = torch.clamp(ratio_T, low, high)
        return -torch.minimum(ratio_T * advantages_T, clipped_T * advantages_T).sum()
    raise ValueError(f"loss_fn {loss_fn!r} is unknown; choose one of {', '.join(REQUIRED_INPUTS)}")


def check_inputs(loss_fn: str, index: int, inputs: dict, length: int) -> None:
    """A clear error when a datum lacks an input its loss needs or has one of the wrong length."""
    if loss_fn not in REQUIRED_INPUTS:
        raise ValueError(f"loss_fn {loss_fn!r} is unknown; choose one of {', '.join(REQUIRED_INPUTS)}")
    for key in REQUIRED_INPUTS[loss_fn]:
        if key not in inputs:
            raise ValueError(f"datum {index}: loss {loss_fn} needs loss_fn_inputs[{key!r}]")
    for key, value in inputs.items():
        entries = len(value.to_numpy()) if hasattr(value, "to_numpy") else len(value)
        if entries != length:
            raise ValueError(f"datum {index}: loss_fn_inputs[{key!r}] has {entries} entries, "
                             f"model_input has {length} tokens")
