"""What both distillation modes sample with: `sample_group` (a model's `group_size` replies to one conversation) and
`teacher_client` (the teacher: the base model, a checkpoint, or with backend=tinker a hosted model). On-policy
distillation samples the student with it (loop.py), prompt distillation the teacher (prompt.py). Not here: training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinker import types

from cookbook_engine.config import DistillConfig
from cookbook_engine.rl.types import Rollout, RolloutGroup
from cookbook_engine.training import reference

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import SamplingClient


async def sample_group(
    prompt: list[dict], renderer: Any, client: SamplingClient, config: DistillConfig, seed: int
) -> RolloutGroup:
    """`client`'s group_size replies to one conversation (reward 0: no grader says what is good)."""
    model_input = renderer.build_generation_prompt(prompt)
    params = types.SamplingParams(
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        top_p=config.top_p if config.temperature > 0 else 1.0,
        stop=renderer.get_stop_sequences(),
        seed=seed,
    )
    response = await client.sample_async(model_input, config.group_size, params)
    tokens = model_input.to_ints()
    rollouts_G = [
        Rollout(tokens, list(seq.tokens), list(seq.logprobs or []), str(seq.stop_reason), 0.0, {}, {})
        for seq in response.sequences
        if seq.tokens
    ]
    return RolloutGroup(rollouts_G, ["distill"])


def teacher_client(service: Any, config: DistillConfig, store: Any = None) -> SamplingClient:
    """The teacher: base, a checkpoint, or (backend=tinker) a hosted model by name."""
    if config.backend == "tinker" and "://" not in config.teacher and config.teacher != reference.BASE:
        return reference.resolved_client(service.create_sampling_client(base_model=config.teacher))
    return reference.sampling_client_for(service, config.model, config.teacher, store)
