"""Pieces every training loop shares: the tokenizer for a config, LR schedules, Adam settings,
building datums from tokens, saving checkpoints and starting a training client (fresh, from a checkpoint or
resumed). No loop logic here: SL, DPO and RL each own their loop; the learning rate is learning_rate.py's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tinker import types

from cookbook_engine import models
from cookbook_engine.backends import compat, service_client
from cookbook_engine.config import CommonConfig
from cookbook_engine.rl.suggested import train_mlp_used
from cookbook_engine.training import lora_a

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import ServiceClient, TrainingClient
    from cookbook_engine.training.context import RunContext


def tokenizer_for(config: CommonConfig) -> Any:
    if config.backend == "tinker":
        from cookbook_engine.backends.tinker import hosted_tokenizer

        return hosted_tokenizer(config.model)
    return models.load_tokenizer(config.model)


def lr_multiplier(schedule: str, step: int, total_steps: int) -> float:
    """tinker-cookbook's schedules: linear decay to 0, cosine to 0, or constant."""
    progress = step / max(1, total_steps)
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "constant":
        return 1.0
    raise ValueError(f"lr_schedule {schedule!r} is unknown")


def adam_params(config: CommonConfig, learning_rate: float) -> types.AdamParams:
    return types.AdamParams(
        learning_rate=learning_rate,
        beta1=config.beta1,
        beta2=config.beta2,
        eps=config.eps,
        weight_decay=config.weight_decay,
        grad_clip_norm=config.grad_clip_norm,
    )


def datum_from_tokens(tokens: list[int], weights: list[float]) -> types.Datum:
    """Next-token prediction: the model sees tokens[:-1] and is scored on tokens[1:] with weights[1:]."""
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens[1:], dtype="int64"),
            "weights": types.TensorData(data=weights[1:], dtype="float32"),
        },
    )


def fit_length(
    tokens: list[int], weights: list[float], max_length: int, overlong: str
) -> tuple[list[int], list[float]] | None:
    """Truncate (or drop, returning None) an example longer than max_length; None also when truncation leaves
    nothing to train on."""
    if len(tokens) <= max_length:
        return tokens, weights
    if overlong == "drop":
        return None
    tokens, weights = tokens[:max_length], weights[:max_length]
    return (tokens, weights) if any(w > 0 for w in weights[1:]) else None


def start_training_client(
    config: CommonConfig, resume: dict | None, ctx: RunContext | None = None
) -> tuple[ServiceClient, TrainingClient, int]:
    """(service client, training client, first step): resumed from a checkpoint's state with its optimizer, or
    started from `start_checkpoint`'s weights, or fresh LoRA. The run's context `ctx`, when given, keeps the
    training client, so the studio's chat can take a fresh snapshot of the live weights between steps."""
    service: ServiceClient = service_client(
        config.backend, device=config.device, dtype=config.dtype, clocked=config.clocked
    )
    compute = getattr(service, "compute", None)  # the local backend's device and dtype, with the reason
    if ctx is not None and compute is not None:
        ctx.note(f"compute: {compute.label}: {compute.reason}")
    start = getattr(config, "start_checkpoint", "")
    client: TrainingClient
    if resume is not None:
        client = service.create_training_client_from_state_with_optimizer(resume["state_path"]).result()
        first_step = int(resume["loop_state"].get("batch", resume["step"]))
    elif start:
        client, first_step = service.create_training_client_from_state(start).result(), 0
    else:
        client, first_step = (
            service.create_lora_training_client(
                config.model,
                rank=lora_a.rank_used(config),
                seed=config.seed,
                train_mlp=train_mlp_used(config),
                train_attn=config.train_attn,
                # the hosted service's default; this machine's backends have no LoRA on the unembedding (asking
                # for it printed a warning on every run, `make demo` included)
                train_unembed=config.backend == "tinker",
            ).result(),
            0,
        )
    if ctx is not None:
        ctx.training_client = client
    return service, client, first_step


async def save_checkpoint(
    client: TrainingClient, ctx: RunContext, *, step: int, name: str, loop_state: dict, final: bool = False
) -> dict[str, str]:
    """Save the full state (weights + optimizer, for resuming) and sampler weights, and record both."""
    state = await (await client.save_state_async(name))
    sampler = await (await client.save_weights_for_sampler_async(name))
    paths = {  # local checkpoints by folder (export, delete and evals read them there), hosted ones by tinker:// name
        "state_path": compat.local_folder(client, state.path),
        "sampler_path": compat.local_folder(client, sampler.path),
    }
    ctx.logger.log_checkpoint(step=step, name=name, kind="both", loop_state={**loop_state, "final": final}, **paths)
    ctx.note(f"saved step {step}{' (final)' if final else ''}: checkpoint {name}")  # the log says what the table shows
    return paths
