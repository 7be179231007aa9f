"""LoRA that reads only what ordinary chats do not use (`lora_a=null_space`): LoRA's input side A is fixed, for each
adapted projection, to the `rank` input directions where the task's inputs differ most from ordinary chats' inputs,
and only B trains. The update B A x is then small wherever x looks like an ordinary chat, so what the model answers to
ordinary questions stays as it was by construction rather than by what a replay set happens to rehearse (AlphaEdit,
Fang et al. 2025, and LoRA-Null: an update in the null space of preserved knowledge's activations).

The directions: C_keep = the base model's mean x x^T over the reply and prompt tokens of ordinary chats (the base
model's own replies to ordinary questions, `builtin.replay_rows()` and `builtin.neighbour_rows()`), C_task = the same
over the task's chats; A's rows are the generalised eigenvectors of (C_task, C_keep + ridge x mean eigenvalue x I)
with the largest ratio, each of unit length. The covariances are computed in fp32 on a separate copy of the base
model (about 2.5 minutes on a 2-core CPU for the default model) and cached in the model cache, keyed by the model,
the projections and every token they were computed from; the directions follow from them in seconds.

Measured (issue 23, benchmarks/README.md "RL that reads away from ordinary chats" and "DPO and the SFT demo with A
fixed"): the RL arithmetic default learns its sums as before and the DPO default its own kinds of pairs, and both keep
the base model's ordinary answers within the interval of zero. Not here: which runs use
it and on which task's chats (training/lora_a.py), the local backend's fixing of A (backends/local.py `fix_lora_a`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from cookbook_engine import models, paths, renderers

if TYPE_CHECKING:
    import torch

RIDGE = 1e-3  # x the mean eigenvalue of C_keep: 1e-4 broke the SFT demo's model, 3e-3 kept less (benchmarks/README.md)
CACHE_FOLDER = "null-space"


def keep_chats() -> list[dict]:
    """Ordinary chats whose inputs the update must leave alone: the base model's own replies to ordinary questions
    (none asks a `builtin:retention` question)."""
    from cookbook_engine.data import builtin

    return builtin.replay_rows() + builtin.neighbour_rows()


def rendered(rows: list[dict], renderer) -> list[list[int]]:
    """Each chat's tokens (prompt and reply) as the training renderer writes them."""
    out = []
    for row in rows:
        tokens = renderer.build_supervised_example(row["messages"], "last_assistant_message")[0]
        out.append(list(tokens.to_ints()) if hasattr(tokens, "to_ints") else list(tokens))
    return out


def input_covariances(
    model, token_lists: list[list[int]], pad: int, modules: tuple[str, ...]
) -> dict[str, torch.Tensor]:
    """Per projection whose last name is in `modules`: the mean over every real token of x x^T of its input x."""
    import torch

    sums: dict[str, torch.Tensor] = {}
    mask_now: list[torch.Tensor] = []
    shared: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = []
    for name, module in model.named_modules():
        if name.split(".")[-1] in modules and isinstance(module, torch.nn.Linear):

            def hook(_module, args, _out, name=name):
                key = args[0].data_ptr()  # q/k/v read one tensor: its x x^T is computed once
                if key not in shared:  # the tensor is kept in `shared`, so its address is not reused meanwhile
                    x = args[0].float()[mask_now[0].bool()]
                    shared[key] = (args[0], x.T @ x)
                sums[name] = sums.get(name, 0) + shared[key][1]

            hooks.append(module.register_forward_hook(hook))
    tokens = 0
    try:
        with torch.no_grad():
            for start in range(0, len(token_lists), 8):
                batch = token_lists[start : start + 8]
                width = max(len(t) for t in batch) - 1  # as training sees them: the last token is only a target
                ids_B_T = torch.full((len(batch), width), pad, dtype=torch.long)
                mask_B_T = torch.zeros(len(batch), width, dtype=torch.long)
                for b, tokens_T in enumerate(batch):
                    ids_B_T[b, : len(tokens_T) - 1] = torch.tensor(tokens_T[:-1])
                    mask_B_T[b, : len(tokens_T) - 1] = 1
                mask_now[:] = [mask_B_T]
                shared.clear()
                model.model(input_ids=ids_B_T, attention_mask=mask_B_T)  # the LM head's input is not needed
                tokens += int(mask_B_T.sum())
    finally:
        for h in hooks:
            h.remove()
    return {name: s / tokens for name, s in sums.items()}


def reading_directions(keep: torch.Tensor, task: torch.Tensor, rank: int, ridge: float = RIDGE) -> torch.Tensor:
    """The `rank` input directions (unit rows, the largest ratio first) maximising v^T task v / v^T (keep + ridge x
    mean eigenvalue of keep) v."""
    import torch

    d = keep.shape[0]
    keep = keep.double() + ridge * torch.trace(keep).double() / d * torch.eye(d, dtype=torch.float64)
    values, vectors = torch.linalg.eigh(keep)
    whiten = vectors / values.sqrt()  # W^T keep W = I
    _, ratio_vectors = torch.linalg.eigh(whiten.T @ task.double() @ whiten)
    directions = (whiten @ ratio_vectors[:, -rank:]).T  # rank x d, largest ratios last
    return (directions / directions.norm(dim=1, keepdim=True)).float().flip(0)


def directions_for(
    model_name: str, task_chats: list[dict], rank: int, modules: tuple[str, ...], ridge: float = RIDGE
) -> dict[str, torch.Tensor]:
    """{projection name ("model.layers.0.self_attn.q_proj"): A (rank x d_in)} for the base model `model_name`."""
    keep, task = covariances_for(model_name, task_chats, modules)
    return {name: reading_directions(keep[name], task[name], rank, ridge).contiguous() for name in keep}


def _tokens(model_name: str, task_chats: list[dict]):
    """(tokenizer, the keep chats' tokens, the task chats' tokens) as the training renderer writes them."""
    tokenizer = models.load_tokenizer(model_name)
    renderer = renderers.get_renderer("auto", tokenizer)
    return tokenizer, rendered(keep_chats(), renderer), rendered(task_chats, renderer)


def _cache_file(model_name: str, modules: tuple[str, ...], keep_tokens: list, task_tokens: list) -> Path:
    key = hashlib.sha256(
        json.dumps([models.canonical_name(model_name), sorted(modules), keep_tokens, task_tokens]).encode()
    ).hexdigest()[:24]
    return paths.models_dir() / CACHE_FOLDER / f"{key}.safetensors"


def cache_path(model_name: str, task_chats: list[dict], modules: tuple[str, ...]) -> Path:
    """Where the covariances of `model_name` over the keep chats and `task_chats` are cached (present once computed)."""
    _, keep_tokens, task_tokens = _tokens(model_name, task_chats)
    return _cache_file(model_name, modules, keep_tokens, task_tokens)


def covariances_for(
    model_name: str, task_chats: list[dict], modules: tuple[str, ...]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(C_keep, C_task) per projection, from the model cache when computed before from the same tokens (they do not
    depend on the rank or the ridge, so every run of a model and task shares them)."""
    from safetensors.torch import load_file, save_file

    tokenizer, keep_tokens, task_tokens = _tokens(model_name, task_chats)
    cached = _cache_file(model_name, modules, keep_tokens, task_tokens)
    if not cached.exists():
        model = models.load_model(model_name)  # fp32, its own copy: the run's model may be in bf16 and is adapted
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        both = {f"keep:{n}": c for n, c in input_covariances(model, keep_tokens, pad, modules).items()}
        both |= {f"task:{n}": c for n, c in input_covariances(model, task_tokens, pad, modules).items()}
        del model
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")  # two processes may compute it at once
        save_file({k: v.contiguous() for k, v in both.items()}, str(partial))
        partial.replace(cached)  # a reader never sees half a file
    both = load_file(str(cached))
    keep = {k.removeprefix("keep:"): v for k, v in both.items() if k.startswith("keep:")}
    task = {k.removeprefix("task:"): v for k, v in both.items() if k.startswith("task:")}
    return keep, task
