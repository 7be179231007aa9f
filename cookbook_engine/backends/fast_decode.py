"""A minimal decoder for Llama-architecture models, used by the sampler when it can: merged LoRA weights, fused
projections, a preallocated KV cache, oneDNN matmuls.

`MergedLlama.from_model(model)` reads a transformers Llama model (peft-wrapped or not) in its current adapter state
and builds fp32 copies of each layer's weights with the active LoRA adapter merged in (W + scaling * B @ A), q/k/v
fused into one matrix and gate/up into another, stored in oneDNN's blocked layout; the LM head gets such a copy
too (~110 MB for the default model), the embedding table is shared. A model held in bf16 (dtype=auto on a CPU with
bf16 units, device.py) decodes here too (the model's own bf16 forward would leave a batch of prompts to run one
prompt at a time: an evaluation 10x slower), in one of two ways the calibration chooses per CPU
(fast_ops.decode_in_bf16): where a decode step's matmul measured faster in bf16 (an Intel Xeon with AMX: weights
stream at half the bytes), the layers' merged weights are rounded to bf16 once and their matmuls run in bf16 on
activations rounded to bf16, with the residual stream, norms, attention, KV cache and LM head in fp32; elsewhere (an
AMD EPYC with AVX-512 BF16 but no AMX) everything is fp32 arithmetic on the bf16 weights. Either way the logits are
close to, not equal to, an fp32 model's (tests/test_bf16.py bounds the difference). It returns None
for anything it does not reproduce exactly (other architectures, biases, rope types that change with length,
adapter variants such as DoRA), and the sampler then uses the model's own forward. The arithmetic follows
transformers' LlamaModel step for step (RMSNorm, rotary embedding from the model's own module, causal SDPA), so
logits agree with the model's to fp32 rounding; tests/test_fast_paths.py checks greedy tokens and log-probs.

Not here: choosing tokens, stops, rows that finish (sampler.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cookbook_engine.backends import fast_ops

STATIC_ROPE_TYPES = {"default", "linear", "llama3"}


@dataclass
class _At:
    """Where a forward writes in the KV cache: the cache rows (a prefill: its prompt's rows; a decode step: all),
    the first column, and which columns each row may attend to (None: all before its own)."""

    rows: torch.Tensor | None  # a prefill: the prompt (row of x) of each cache row; None: row for row (or broadcast)
    column: int
    mask: torch.Tensor | None  # a prefill: B x 1 x T x T; a decode step: the cache columns each row may see, B x C
    prefill: bool  # prompts attend to themselves only (their keys are all in hand); a decode step to the cache


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # (q + 2 kv) * head_dim x hidden
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # 2 intermediate x hidden
    down: torch.Tensor


class KVCache:
    """Keys and values of every layer for `rows` sequences, room for `capacity` positions, allocated once."""

    def __init__(self, layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int):
        self.keys = torch.zeros(layers, rows, kv_heads, capacity, head_dim)
        self.values = torch.zeros(layers, rows, kv_heads, capacity, head_dim)

    def keep_rows(self, rows: list[int]) -> None:
        index = torch.tensor(rows)
        self.keys = self.keys.index_select(1, index)
        self.values = self.values.index_select(1, index)


def _packed(weight: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    """The fp32 weight for decoding. In bf16 (a bf16 model where the calibration measured bf16 decode matmuls faster,
    fast_ops.decode_in_bf16): rounded to bf16 once, in oneDNN's blocked layout. In fp32: in that layout (about
    1.5-2x faster matmuls at decode batch sizes on the machines measured so far) when the calibration chose it for
    decoding here; else a plain contiguous copy."""
    if bf16:
        return torch.ops.mkldnn._reorder_linear_weight(weight.to(torch.bfloat16).contiguous(), None)
    if not fast_ops.ONEDNN or fast_ops.KERNELS["decode"] != "onednn_packed":
        return weight.contiguous()
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None)


def matmul_t(x_N_K: torch.Tensor, weight_M_K: torch.Tensor) -> torch.Tensor:
    """A decode matmul (weights built by `_packed`): fp32 with the kernel the calibration chose for decoding, or on
    a bf16 weight a bf16 matmul of the activations rounded to bf16, its result returned in fp32 (the residual
    stream, norms, attention and the KV cache stay fp32)."""
    if weight_M_K.dtype == torch.bfloat16:
        x_N_K = x_N_K.to(torch.bfloat16)
        return torch.ops.mkldnn._linear_pointwise(x_N_K, weight_M_K, None, "none", [], "").float()
    return fast_ops.matmul_t(x_N_K, weight_M_K, "decode")


def _merged_weight(module) -> torch.Tensor | None:
    """A linear layer's weight with the active LoRA adapter merged in (a new tensor), or None if unsupported."""
    base = getattr(module, "base_layer", None)
    if base is None:
        return module.weight.detach().float() if module.bias is None else None
    if base.bias is not None or getattr(module, "merged", False):
        return None
    weight = base.weight.detach().float()
    if module.disable_adapters:
        return weight
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if name in getattr(module, "lora_variant", {}) or module.use_dora.get(name, False):
            return None
        delta = module.lora_B[name].weight.detach().float() @ module.lora_A[name].weight.detach().float()
        weight = weight + module.scaling[name] * delta
    return weight


class MergedLlama:
    def __init__(self, causal_lm, layers: list[_Layer]):
        config = causal_lm.config
        self.layers = layers
        decoder = causal_lm.get_decoder()
        head = causal_lm.get_output_embeddings()
        self.head_plain = fast_ops.fp32_head_weight(head).detach()  # the model's own (prompt log-probs); in bf16
        # its fp32 copy, the one the training step's head uses
        embed = decoder.embed_tokens.weight
        self.embed = self.head_plain if embed is head.weight else embed.detach().float()  # tied: one fp32 copy
        self.head = _packed(self.head_plain)  # a copy; the embedding stays
        self.final_norm = decoder.norm.weight.detach().float()
        self.rotary = decoder.rotary_emb
        self.eps = float(config.rms_norm_eps)
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.intermediate = config.intermediate_size

    @classmethod
    def from_model(cls, model) -> MergedLlama | None:
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = causal_lm.config
        rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
        if (
            config.model_type != "llama"
            or config.attention_bias
            or config.mlp_bias
            or config.hidden_act != "silu"
            or rope not in STATIC_ROPE_TYPES
            or causal_lm.dtype not in (torch.float32, torch.bfloat16)
            or next(causal_lm.parameters()).device.type != "cpu"
        ):  # a CPU path; elsewhere the model's forward
            return None
        bf16 = causal_lm.dtype == torch.bfloat16 and fast_ops.decode_in_bf16()
        layers = []
        with torch.no_grad():
            for layer in causal_lm.get_decoder().layers:
                attn, mlp = layer.self_attn, layer.mlp
                weights = [
                    _merged_weight(m)
                    for m in (
                        attn.q_proj,
                        attn.k_proj,
                        attn.v_proj,
                        attn.o_proj,
                        mlp.gate_proj,
                        mlp.up_proj,
                        mlp.down_proj,
                    )
                ]
                merged = [w for w in weights if w is not None]
                if len(merged) < len(weights):
                    return None
                q, k, v, o, gate, up, down = merged
                layers.append(
                    _Layer(
                        layer.input_layernorm.weight.detach().float(),
                        _packed(torch.cat([q, k, v]), bf16),
                        _packed(o, bf16),
                        layer.post_attention_layernorm.weight.detach().float(),
                        _packed(torch.cat([gate, up]), bf16),
                        _packed(down, bf16),
                    )
                )
        return cls(causal_lm, layers)

    # --- the arithmetic of transformers' Llama, one layer at a time ---------------------------------------------
    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps)  # LlamaRMSNorm: weight * (x * rsqrt(mean(x^2) + eps))

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def rope_table(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (length x head_dim) from the model's own rotary module."""
        positions = torch.arange(length)[None]
        cos, sin = self.rotary(self.embed[:1][None], position_ids=positions)
        return cos[0], sin[0]

    def _layer(self, x_B_T_D, layer: _Layer, index: int, cache: KVCache, at: _At, cos, sin):
        rows, length, _ = x_B_T_D.shape
        h = self._norm(x_B_T_D, layer.input_norm)
        qkv = matmul_t(h.reshape(rows * length, -1), layer.qkv).view(rows, length, -1)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q = qkv[..., :q_size].reshape(rows, length, self.heads, self.head_dim).transpose(1, 2)
        k = qkv[..., q_size : q_size + kv_size].reshape(rows, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = qkv[..., q_size + kv_size :].reshape(rows, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        end = at.column + length
        # a prefill fills the rows of every sample of its prompt (one prompt: by broadcasting)
        cache.keys[index, :, :, at.column : end] = k if at.rows is None else k.index_select(0, at.rows)
        cache.values[index, :, :, at.column : end] = v if at.rows is None else v.index_select(0, at.rows)
        if at.prefill:
            keys, values, mask = k, v, at.mask
        else:
            keys, values = cache.keys[index, :rows, :, :end], cache.values[index, :rows, :, :end]
            mask = None if at.mask is None else at.mask[:, None, None, :end]
        attn = F.scaled_dot_product_attention(
            q,
            keys,
            values,
            attn_mask=mask,
            is_causal=at.prefill and mask is None,
            enable_gqa=self.heads != self.kv_heads,
        )
        attn = attn.transpose(1, 2).reshape(rows * length, q_size)
        x_B_T_D = x_B_T_D + matmul_t(attn, layer.o).view(rows, length, -1)
        h = self._norm(x_B_T_D, layer.post_norm).reshape(rows * length, -1)
        gate_up = matmul_t(h, layer.gate_up)
        act = F.silu(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate :]
        return x_B_T_D + matmul_t(act, layer.down).view(rows, length, -1)

    @torch.inference_mode()
    def prefill(
        self,
        prompts_P_T: torch.Tensor,
        offsets_P: list[int],
        rows_B: torch.Tensor | None,
        cache: KVCache,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """Final (normed) hidden states (P x T x D) of P prompts in one batch, each right-aligned in T columns (prompt
        p starts at column offsets_P[p]; the columns before it hold any token and are masked out), their keys and
        values written to the cache's columns 0..T-1 in the rows of their samples (rows_B: the prompt of each cache
        row; None: one prompt, in every row)."""
        prompts, length = prompts_P_T.shape
        x = F.embedding(prompts_P_T, self.embed)
        mask = None  # one prompt, or several of one length: plain causal attention
        if any(offsets_P):
            offsets = torch.tensor(offsets_P)
            columns = torch.arange(length)
            positions_P_T = (columns[None] - offsets[:, None]).clamp(min=0)
            cos, sin = cos[positions_P_T][:, None], sin[positions_P_T][:, None]  # P x 1 x T x head_dim
            causal_T_T = columns[None] <= columns[:, None]
            visible_P_T = columns[None] >= offsets[:, None]
            # padding rows see themselves only, so that no row's attention is empty (NaN)
            mask = (causal_T_T[None] & visible_P_T[:, None]) | torch.eye(length, dtype=torch.bool)[None]
            mask = mask[:, None]
        else:
            cos, sin = cos[:length], sin[:length]
        at = _At(rows_B, 0, mask, prefill=True)
        for index, layer in enumerate(self.layers):
            x = self._layer(x, layer, index, cache, at, cos, sin)
        return self._norm(x, self.final_norm)

    @torch.inference_mode()
    def step(
        self,
        tokens_B: torch.Tensor,
        cache: KVCache,
        column: int,
        positions_B: torch.Tensor | None,
        key_mask_B_C: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """Final (normed) hidden states (B x D) of one new token per row, written to cache column `column`.
        positions_B: each row's position in its own sequence (None: all at `column`); key_mask_B_C: the cache
        columns each row attends to (None: all up to `column`)."""
        x = F.embedding(tokens_B[:, None], self.embed)
        if positions_B is None:
            cos_r, sin_r = cos[column : column + 1], sin[column : column + 1]
        else:  # rows at different positions: B x 1 x 1 x head_dim, broadcast over the heads
            cos_r, sin_r = cos[positions_B][:, None, None], sin[positions_B][:, None, None]
        at = _At(None, column, key_mask_B_C, prefill=False)
        for index, layer in enumerate(self.layers):
            x = self._layer(x, layer, index, cache, at, cos_r, sin_r)
        return self._norm(x, self.final_norm)[:, 0]

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return KVCache(len(self.layers), rows, self.kv_heads, capacity, self.head_dim)

    def logits(self, hidden_N_D: torch.Tensor) -> torch.Tensor:
        return matmul_t(hidden_N_D.contiguous(), self.head)
