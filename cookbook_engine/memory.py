"""Will a local run fit in memory? An estimate made before the run starts, from the model's shape and the run's
settings, set against the memory this machine (or its GPU) has free; a run that would not fit is refused with the
numbers and what to change.

How the estimate is made (measured on SmolLM2-135M-Instruct, fp32, this project's 2-core machines): a process with
the model loaded holds ~0.45 GB besides the weights (Python, torch, transformers); a LoRA forward/backward keeps, per
token of its micro-batch (at most MAX_TOKENS_PER_MICROBATCH), about 12 hidden + 4 intermediate + 3 key/value floats
per layer for the backward pass plus six vocabulary-sized rows for the loss (logits, softmax, gradients: what the
standard path holds; the packed CPU path needs less): 2.8 MB a token for this model, where a 2,048-token micro-batch
measured 3.6-5.1 GB above the loaded process, the higher figure inside a long test session (tests/test_memory.py
checks the estimate against a measured peak). The weights count once per process: runs in one process share one
model worker, and its FIFO runs one micro-batch at a time, so a second run there adds only its adapter and optimizer.

Not here: measuring a running process (speed.process_usage), or hosted (Tinker) runs, whose memory is the
service's. COOKBOOK_MEMORY_CHECK=off skips the refusal (the estimate is still computed).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from cookbook_engine import config as cfg, models

GB = 1024**3
RUNTIME_BYTES = int(0.45 * GB)  # Python + torch + transformers + tokenizer, measured with the default model
FP32 = 4
ADAM_COPIES = 4  # LoRA weights, their gradients and AdamW's two moments, all fp32


class WontFitError(cfg.ConfigError):
    """The run's estimated memory is more than this machine has free; the message gives both and what to change."""


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    vocab: int
    kv_width: int  # key/value heads x head size
    parameters: int


@dataclass(frozen=True)
class MemoryNeed:
    weights: int  # 0 when this process already holds the model
    runtime: int  # 0 likewise
    activations: int  # one micro-batch's forward/backward (or the sampler's cache for RL, whichever is larger)
    adapter: int  # LoRA weights, gradients and optimizer state
    microbatch_tokens: int

    @property
    def total(self) -> int:
        return self.weights + self.runtime + self.activations + self.adapter

    def describe(self) -> str:
        parts = [
            f"activations of a {self.microbatch_tokens:,}-token micro-batch {self.activations / GB:.1f} GB",
            f"LoRA and optimizer {self.adapter / GB:.2f} GB",
        ]
        if self.weights:
            parts = [f"model weights {self.weights / GB:.1f} GB", f"runtime {self.runtime / GB:.1f} GB"] + parts
        return f"about {self.total / GB:.1f} GB ({', '.join(parts)})"


def model_shape(model: str) -> ModelShape | None:
    """The model's dimensions from its config.json, or None when it is not on this machine yet (a hub model)."""
    try:
        info = models.resolve(model)
        config = json.loads((Path(info.location) / "config.json").read_text())
    except (OSError, ValueError, models.ModelError):
        return None
    hidden, layers = config.get("hidden_size"), config.get("num_hidden_layers")
    intermediate, vocab = config.get("intermediate_size"), config.get("vocab_size")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, intermediate, vocab)):
        return None
    heads = config.get("num_attention_heads") or 1
    head_size = config.get("head_dim") or hidden // heads
    kv_width = (config.get("num_key_value_heads") or heads) * head_size
    per_layer = hidden * (2 * hidden + 2 * kv_width) + 3 * hidden * intermediate + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return ModelShape(hidden, intermediate, layers, vocab, kv_width, layers * per_layer + embeddings + hidden)


def estimate(
    config: cfg.CommonConfig, prepared, shape: ModelShape, model_loaded: bool, dtype_bytes: int = FP32
) -> MemoryNeed:
    """What `config` needs on top of what this process holds now (`model_loaded`: it already has the model)."""
    from cookbook_engine.backends.local import MAX_TOKENS_PER_MICROBATCH
    from cookbook_engine.training.lora_a import rank_used

    tokens = min(MAX_TOKENS_PER_MICROBATCH, _largest_batch_tokens(config, prepared))
    per_token = FP32 * (
        shape.layers * (12 * shape.hidden + 4 * shape.intermediate + 3 * shape.kv_width) + 6 * shape.vocab
    )  # the standard path keeps logits, softmax, gradients and copies
    activations = tokens * per_token
    # the sampler's key/value cache for a batch of samples, and merged weights
    if isinstance(config, cfg.RLConfig | cfg.DistillConfig):
        rows = config.groups_per_batch * config.group_size
        cache = rows * (prepared.longest_prompt + config.max_tokens) * shape.layers * 2 * shape.kv_width * FP32
        activations = max(activations, cache + shape.parameters * dtype_bytes)
    # LoRA on q, k, v, o and gate, up, down (the local backend's targets): rank x (inputs + outputs) each
    lora_per_rank = shape.layers * (
        4 * shape.hidden + 2 * (shape.hidden + shape.kv_width) + 3 * (shape.hidden + shape.intermediate)
    )
    adapter = ADAM_COPIES * FP32 * rank_used(config) * lora_per_rank
    return MemoryNeed(
        0 if model_loaded else shape.parameters * dtype_bytes,
        0 if model_loaded else RUNTIME_BYTES,
        activations,
        adapter,
        tokens,
    )


def free_bytes(device: str) -> int:
    """Memory free for a new run now: the GPU's free memory on CUDA, else the machine's available RAM."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    import psutil

    return int(psutil.virtual_memory().available)


def check_fits(config: cfg.CommonConfig, prepared) -> MemoryNeed | None:
    """Refuse (WontFitError) a local run that would not fit in the memory free now; returns the estimate, or None
    when there is nothing to check (a hosted run, or a model whose shape is not known here)."""
    if config.backend != "local":
        return None
    shape = model_shape(config.model)
    if shape is None:
        return None
    from cookbook_engine import device
    from cookbook_engine.backends import local

    choice = device.choose(config.device, dtype=config.dtype)
    loaded = local.worker_exists(config.model, config.device, config.dtype)
    need = estimate(config, prepared, shape, loaded, dtype_bytes=choice.dtype.itemsize)
    free = free_bytes(choice.device)
    if need.total > free and os.environ.get("COOKBOOK_MEMORY_CHECK", "on").lower() != "off":
        where = "GPU memory" if choice.device == "cuda" else "memory"
        raise WontFitError(
            f"this run needs {need.describe()} and only {free / GB:.1f} GB of {where} is free now. Lower "
            f"batch_size or max_length (this run's largest micro-batch: {need.microbatch_tokens:,} tokens), stop "
            "another run, or close other programs; COOKBOOK_MEMORY_CHECK=off starts it anyway."
        )
    return need


def _largest_batch_tokens(config: cfg.CommonConfig, prepared) -> int:
    """Tokens in the largest forward/backward the run will do (before the micro-batch cap)."""
    if isinstance(config, cfg.DistillConfig) and config.mode == "prompt":  # SL on the teacher's replies
        return config.batch_size * (prepared.longest_prompt + config.max_tokens)
    if isinstance(config, cfg.RLConfig | cfg.DistillConfig):
        return config.groups_per_batch * config.group_size * (prepared.longest_prompt + config.max_tokens)
    if config.kind == "dpo":
        longest = max((p.chosen.model_input.length + p.rejected.model_input.length for p in prepared.train), default=0)
    else:
        longest = max((d.model_input.length for d in prepared.train), default=0)
    return config.batch_size * longest
