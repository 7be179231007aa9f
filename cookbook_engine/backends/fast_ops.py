"""Exact fast paths for the local backend's forward/backward on CPU, used by local.py's hot path.

Four things, each computing the same numbers as the straightforward path (up to fp32 rounding):
- **oneDNN matmuls for frozen linear layers.** On this machine torch's default fp32 matmul (MKL) runs its AVX2 code
  on AMD CPUs, at about half of what oneDNN's `_linear_pointwise` reaches with AVX-512. `install_frozen_linears`
  turns the base model's `nn.Linear` layers into `FrozenLinear`, which calls oneDNN for the forward and for the
  gradient with respect to its input while the weight is frozen, and falls back to `F.linear` otherwise. With bf16
  base weights it is also the mixed-precision boundary: bf16 matmul, fp32 activations in and out.
- **Fused LoRA.** `install_fast_lora` gives peft's LoRA Linear layers a forward that computes
  x W^T + s (x A^T) B^T as one autograd op on oneDNN (gradients for x, A, B), instead of four modules and two adds.
- **Packed sequences without padding.** `packed_logprobs` runs a micro-batch as one row of all its sequences'
  tokens: the matmuls see every token once and no padding, and attention runs per sequence (causal SDPA on each
  sequence's slice, through transformers' attention-function registry), so a sequence never sees another. Sequences
  that begin with the same unweighted prompt (an RL group, a DPO pair) hold it once in the row (packing.py).
- **The LM head only where a gradient is needed.** Log-probabilities of the targets come from chunked
  logits and an accurate log-sum-exp; rows whose loss weight is zero are scored without autograd, and the rows that
  need a gradient go through `_HeadLogprobs`, whose backward reuses the saved exponentials in place.

Not here: which rows need a gradient (local.py decides from the loss), sampling (sampler.py).
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

from cookbook_engine.backends import packing

PACKED_ATTENTION = "cookbook_packed"
HEAD_CHUNK_ROWS = 128  # logits chunk of 128 x 49k fp32 = 25 MB: below glibc's mmap threshold, so no page faults
PACKED_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}  # plain LM head, attention through the registry


# ------------------------------------------------------------------------------------------- oneDNN matmul


def _probe_onednn() -> bool:
    try:
        x, w = torch.randn(4, 8), torch.randn(16, 8)
        return torch.allclose(torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""), x @ w.t(), atol=1e-5)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


ONEDNN = torch.backends.mkldnn.is_available() and _probe_onednn()
# The fp32 matmul kernel per shape class: "train" (a micro-batch's projections, the LM head) is "onednn" or "mkl"
# (torch's own matmul); "decode" (a decode step's few rows) is one of those or "onednn_packed" (oneDNN with the
# weight prepacked in its blocked layout). These defaults are what the backend used before the kernels were
# measured; use_calibrated_kernels() replaces them with this CPU's measured choice (calibration.py).
KERNELS = {"train": "onednn", "decode": "onednn_packed"}


def use_calibrated_kernels() -> dict:
    """Set KERNELS from this CPU's calibration (measured once per CPU model, cached); returns the figures."""
    from cookbook_engine import calibration

    if not ONEDNN or not calibration.enabled():
        return {}
    figures = calibration.kernels(ONEDNN)
    for shape_class in KERNELS:
        KERNELS[shape_class] = figures[shape_class]["chosen"]
    return figures


@cache
def decode_in_bf16() -> bool:
    """Whether the decoder of a model held in bf16 runs its layers' matmuls in bf16 (weights prepacked for oneDNN)
    rather than in fp32 on fp32 copies: only where oneDNN is there and this CPU's calibration measured a decode
    step's matmul at least calibration.MARGIN times as fast in bf16 (weights stream at half the bytes). Decided once
    per process: a decoder is built for every new LoRA snapshot (each RL step), and the calibration is a file."""
    from cookbook_engine import calibration

    if not ONEDNN or not calibration.enabled():
        return False
    return calibration.decode_bf16(KERNELS["decode"])["speedup"] >= calibration.MARGIN


def _onednn_for(shape_class: str) -> bool:
    return ONEDNN and KERNELS[shape_class] != "mkl"


def matmul_t(x_N_K: torch.Tensor, weight_M_K: torch.Tensor, shape_class: str = "train") -> torch.Tensor:
    """x @ weight.T for 2-D fp32 CPU tensors, through oneDNN when it is there and measured fastest for the shape
    class. A weight prepacked for oneDNN (fast_decode) must be called with the class it was packed for."""
    if (
        _onednn_for(shape_class)
        and x_N_K.dtype == torch.float32
        and weight_M_K.dtype == torch.float32
        and not x_N_K.is_cuda
    ):
        return torch.ops.mkldnn._linear_pointwise(x_N_K, weight_M_K, None, "none", [], "")
    return x_N_K @ weight_M_K.t()


def frozen_matmul_t(x_N_K: torch.Tensor, weight_M_K: torch.Tensor) -> torch.Tensor:
    """x @ weight.T for a frozen base weight, which may be kept in bf16 while the activations are fp32 (mixed
    precision): then the matmul runs in bf16 (the CPU's or GPU's fast kernel, fp32 accumulation) and the result comes
    back as fp32, so whatever is added to it afterwards (the LoRA delta, the residual) is added in fp32."""
    if weight_M_K.dtype == x_N_K.dtype:
        return matmul_t(x_N_K, weight_M_K)
    return (x_N_K.to(weight_M_K.dtype) @ weight_M_K.t()).to(x_N_K.dtype)


class _FrozenMatmul(torch.autograd.Function):
    """y = x @ W.T with a gradient for x only (W is frozen)."""

    @staticmethod
    def forward(ctx, x_N_K, weight_M_K):
        ctx.save_for_backward(weight_M_K)
        return frozen_matmul_t(x_N_K, weight_M_K)

    @staticmethod
    def backward(ctx, grad_N_M):
        (weight_M_K,) = ctx.saved_tensors
        return frozen_matmul_t(grad_N_M.contiguous(), weight_M_K.t()), None


class FrozenLinear(torch.nn.Linear):
    """nn.Linear whose forward uses oneDNN while its weight is frozen; same parameters, same state dict. A frozen bf16
    weight given fp32 activations (mixed precision, see install_frozen_linears) computes in bf16 and returns fp32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        mixed = x.dtype == torch.float32 and weight.dtype != torch.float32
        if mixed and weight.requires_grad:  # not frozen after all: plain autograd through the casts
            return F.linear(x.to(weight.dtype), weight, self.bias).to(x.dtype)
        if not mixed and (
            not _onednn_for("train")
            or weight.requires_grad
            or x.dtype != torch.float32
            or weight.dtype != torch.float32
            or x.device.type != "cpu"
        ):
            return F.linear(x, weight, self.bias)
        x_N_K = x.reshape(-1, x.shape[-1])
        if not x_N_K.is_contiguous():
            x_N_K = x_N_K.contiguous()
        if torch.is_grad_enabled() and x.requires_grad:
            y = _FrozenMatmul.apply(x_N_K, weight)
        else:
            y = frozen_matmul_t(x_N_K, weight)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], weight.shape[0])


class FrozenHead(FrozenLinear):
    """The output embeddings (LM head) of a mixed-precision model: fp32 activations give fp32 logits computed from an
    fp32 copy of the frozen bf16 weight, made once. A bf16 matmul rounds its output to bf16, whose steps at a logit's
    size (4 to 32) are 1/32 to 1/4: near-ties became ties and flipped greedy replies (the default model's first
    token for "What is the capital of France?": 'The' 0.08 nats above 'L' in fp32, tied in bf16, then the reply
    "L'Étoile, la Marseillaise, ..."). Costs one fp32 copy of the head (113 MB for the default model)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype != torch.float32 and not self.weight.requires_grad:
            return F.linear(x, fp32_head_weight(self), self.bias)
        return super().forward(x)


def fp32_head_weight(head: torch.nn.Module) -> torch.Tensor:
    """The head's weight in fp32: the weight itself when it is fp32, else its fp32 copy (made on first use, kept)."""
    weight = head.weight
    assert isinstance(weight, torch.Tensor)
    if weight.dtype == torch.float32:
        return weight
    copy: torch.Tensor | None = head.__dict__.get("_fp32_weight")
    if copy is None or copy.device != weight.device:
        with torch.inference_mode(False):  # a plain tensor even when first made while sampling: training reuses it
            copy = weight.detach().float()
        head.__dict__["_fp32_weight"] = copy
    return copy


def install_frozen_linears(model: torch.nn.Module) -> int:
    """Turn every plain nn.Linear of `model` into a FrozenLinear (in place). Call before wrapping with peft, so that
    the LoRA matrices themselves stay plain nn.Linear. Returns how many layers changed.

    A model whose weights are bf16 becomes mixed precision: its input embeddings return fp32, so the residual stream,
    the norms, attention and every addition run in fp32 while the frozen base weights stay bf16 and each FrozenLinear
    runs its matmul in bf16. Without this, peft adds the fp32 LoRA delta to the bf16 base output and rounds the sum
    back to bf16; after a few Adam steps the delta is ~1e-3 of that output, below bf16's half-ulp, and most of each
    update was rounded away (measured: bf16 SFT losses 21-33% above fp32's from the second step on)."""
    changed = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = FrozenLinear
            changed += 1
    get_embeddings = getattr(model, "get_input_embeddings", None)
    embeddings = get_embeddings() if callable(get_embeddings) else None
    if embeddings is not None and embeddings.weight.dtype != torch.float32 and changed:
        embeddings.register_forward_hook(_fp32_output)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if type(head) is FrozenLinear and head.weight.dtype != torch.float32:
        head.__class__ = FrozenHead  # logits in fp32
    return changed


def _fp32_output(module, args, output: torch.Tensor) -> torch.Tensor:
    return output.float()


class _LoraMatmul(torch.autograd.Function):
    """y = x @ W.T + scaling * (x @ A.T) @ B.T with W frozen: peft's vanilla LoRA forward as one op on oneDNN,
    gradients for x, A (unless A is fixed: no grad wanted) and B."""

    @staticmethod
    def forward(ctx, x_N_K, weight_M_K, a_R_K, b_M_R, scaling: float):
        xa_N_R = matmul_t(x_N_K, a_R_K)
        y_N_M = frozen_matmul_t(x_N_K, weight_M_K)
        y_N_M.add_(matmul_t(xa_N_R, b_M_R), alpha=scaling)
        ctx.save_for_backward(x_N_K, weight_M_K, a_R_K, b_M_R, xa_N_R)
        ctx.scaling = scaling
        return y_N_M

    @staticmethod
    def backward(ctx, grad_N_M):
        x_N_K, weight_M_K, a_R_K, b_M_R, xa_N_R = ctx.saved_tensors
        scaling = ctx.scaling
        g_N_M = grad_N_M.contiguous()
        g_xa_N_R = matmul_t(g_N_M, b_M_R.t()).mul_(scaling)
        grad_b = matmul_t(xa_N_R.t().contiguous(), g_N_M.t()).t().mul_(scaling).contiguous()
        grad_a = matmul_t(g_xa_N_R.t().contiguous(), x_N_K.t()) if ctx.needs_input_grad[2] else None  # not a fixed A
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = frozen_matmul_t(g_N_M, weight_M_K.t())
            grad_x.add_(matmul_t(g_xa_N_R, a_R_K.t()))
        return grad_x, None, grad_a, grad_b, None


class _LoraMatmulBf16(torch.autograd.Function):
    """The same op on a bf16 base weight (mixed precision, as torch's autocast and TRL's bf16 run LoRA): every matmul
    in bf16 on the input rounded to bf16 (once for the projections that read the same input, see `_bf16_input`),
    the LoRA matrices rounded to bf16 for the matmul only; the output, the LoRA delta's addition and the gradients
    of x, A (unless A is fixed: no grad wanted) and B are fp32 (A and B and their AdamW state stay fp32 master
    weights). Measured on an Intel Xeon with AMX: the fp32 LoRA matmuls were ~15% of a bf16 training step (thin
    rank-32 matmuls over fp32 activations)."""

    @staticmethod
    def forward(ctx, x_N_K, x16_N_K, weight_M_K, a_R_K, b_M_R, scaling: float):
        a16_R_K, b16_M_R = a_R_K.to(torch.bfloat16), b_M_R.to(torch.bfloat16)
        xa16_N_R = F.linear(x16_N_K, a16_R_K)
        y_N_M = F.linear(x16_N_K, weight_M_K).float()
        y_N_M.add_(F.linear(xa16_N_R, b16_M_R), alpha=scaling)  # the bf16 delta widened as it is added
        ctx.save_for_backward(x16_N_K, weight_M_K, a16_R_K, b16_M_R, xa16_N_R)
        ctx.scaling = scaling
        return y_N_M

    @staticmethod
    def backward(ctx, grad_N_M):
        x16_N_K, weight_M_K, a16_R_K, b16_M_R, xa16_N_R = ctx.saved_tensors
        scaling = ctx.scaling
        g16_N_M = grad_N_M.to(torch.bfloat16).contiguous()
        g_xa16_N_R = (g16_N_M @ b16_M_R).mul_(scaling)
        grad_b = (g16_N_M.t() @ xa16_N_R).float().mul_(scaling)
        grad_a = (g_xa16_N_R.t() @ x16_N_K).float() if ctx.needs_input_grad[3] else None  # not a fixed A
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = (g16_N_M @ weight_M_K).float()
            grad_x.add_(g_xa16_N_R @ a16_R_K)
        return grad_x, None, None, grad_a, grad_b, None


_last_bf16_input: tuple[weakref.ref, int, torch.Tensor] | None = None


def _bf16_input(x: torch.Tensor) -> torch.Tensor:
    """x (fp32, any shape) as a 2-D contiguous bf16 tensor, outside autograd. The q, k and v projections (and gate and
    up) are called with the same tensor: the last cast is kept (by the tensor's identity and version) and reused,
    so each input is rounded once and held once for the backward pass."""
    global _last_bf16_input
    last = _last_bf16_input
    if not x.is_inference() and last is not None and last[0]() is x and last[1] == x._version:
        return last[2]
    with torch.no_grad():
        x16_N_K = x.reshape(-1, x.shape[-1]).to(torch.bfloat16).contiguous()
    _last_bf16_input = None if x.is_inference() else (weakref.ref(x), x._version, x16_N_K)
    return x16_N_K


def _fast_lora_forward(layer, x: torch.Tensor) -> torch.Tensor | None:
    """The fused forward of a peft LoRA Linear, or None when this call needs peft's own (several or no active
    adapters, dropout, a variant such as DoRA, merged weights, a bias, another dtype)."""
    if (
        not _onednn_for("train")
        or layer.disable_adapters
        or layer.merged
        or x.dtype != torch.float32
        or x.device.type != "cpu"
    ):
        return None
    base = layer.base_layer
    active = layer.active_adapters
    if type(base) is not FrozenLinear or base.bias is not None or base.weight.requires_grad or len(active) != 1:
        return None
    name = active[0]
    if name not in layer.lora_A:
        return base(x)
    if (
        name in layer.lora_variant
        or not isinstance(layer.lora_dropout[name], torch.nn.Identity)
        or layer.use_dora.get(name, False)
    ):
        return None
    a_R_K, b_M_R = layer.lora_A[name].weight, layer.lora_B[name].weight
    if layer.lora_A[name].bias is not None or layer.lora_B[name].bias is not None or a_R_K.dtype != torch.float32:
        return None
    x_N_K = x.reshape(-1, x.shape[-1])
    if not x_N_K.is_contiguous():
        x_N_K = x_N_K.contiguous()
    scaling = float(layer.scaling[name])
    if base.weight.dtype == torch.bfloat16:
        y_N_M = _LoraMatmulBf16.apply(x_N_K, _bf16_input(x), base.weight, a_R_K, b_M_R, scaling)
    else:
        y_N_M = _LoraMatmul.apply(x_N_K, base.weight, a_R_K, b_M_R, scaling)
    return y_N_M.reshape(*x.shape[:-1], y_N_M.shape[-1])


def install_fast_lora(model: torch.nn.Module) -> int:
    """Give every peft LoRA Linear of `model` the fused forward (in place, by subclass); layers already done and
    calls the fused path does not cover keep peft's behaviour. Returns how many layers changed."""
    from peft.tuners.lora import Linear as LoraLinear

    changed = 0
    for module in model.modules():
        if type(module) is LoraLinear:
            module.__class__ = _fast_lora_class(LoraLinear)
            changed += 1
    return changed


_FAST_LORA_CLASS: type | None = None


def _fast_lora_class(lora_linear: Any) -> type:  # Any: peft's class, subclassed here at run time
    global _FAST_LORA_CLASS
    if _FAST_LORA_CLASS is None:

        class FastLoraLinear(lora_linear):
            """peft's LoRA Linear with `_fast_lora_forward` when it applies."""

            def forward(self, x, *args, **kwargs):
                if not args and not kwargs:
                    y = _fast_lora_forward(self, x)
                    if y is not None:
                        return y
                return super().forward(x, *args, **kwargs)

        _FAST_LORA_CLASS = FastLoraLinear
    return _FAST_LORA_CLASS


# ---------------------------------------------------------------------------------------- packed attention


def _packed_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Causal attention per segment of a packed row (packing.Segment), a segment after a shared prefix also
    attending to all of that prefix. query (1, H, N, hd), key/value (1, KVH, N, hd)."""
    segments = kwargs["packed_segments"]
    gqa = query.shape[1] != key.shape[1]
    pieces = []
    for segment in segments:
        start, end, context_start, context_end = segment.start, segment.end, segment.context_start, segment.context_end
        if context_end == context_start:
            piece = F.scaled_dot_product_attention(
                query[:, :, start:end],
                key[:, :, start:end],
                value[:, :, start:end],
                is_causal=True,
                scale=scaling,
                enable_gqa=gqa,
            )
        else:
            keys = torch.cat([key[:, :, context_start:context_end], key[:, :, start:end]], dim=2)
            values = torch.cat([value[:, :, context_start:context_end], value[:, :, start:end]], dim=2)
            piece = F.scaled_dot_product_attention(
                query[:, :, start:end],
                keys,
                values,
                attn_mask=_after_prefix_mask(end - start, context_end - context_start, query.device),
                scale=scaling,
                enable_gqa=gqa,
            )
        pieces.append(piece)
    out = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=2)
    return out.transpose(1, 2).contiguous(), None


def _after_prefix_mask(length: int, prefix: int, device) -> torch.Tensor:
    """(length, prefix + length) bool: every query sees the whole prefix, then its own segment causally."""
    own_T_T = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    return torch.cat([torch.ones(length, prefix, dtype=torch.bool, device=device), own_T_T], dim=1)


def _register_packed_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_ATTENTION, _packed_attention)


@contextmanager
def _attention(config, implementation: str):
    previous = config._attn_implementation
    config._attn_implementation = implementation
    try:
        yield
    finally:
        config._attn_implementation = previous


def supports_packed(model) -> bool:
    """True when `model` (a transformers causal LM, maybe peft-wrapped) fits the packed path exactly: a known
    architecture with a plain LM head, no attention dropout and no sliding window, on the CPU."""
    config = model.config
    return (
        next(model.parameters()).device.type == "cpu"  # a CPU path: elsewhere the model's own forward runs
        and getattr(config, "model_type", None) in PACKED_MODEL_TYPES
        and not getattr(config, "attention_dropout", 0.0)
        and getattr(config, "sliding_window", None) is None
        and getattr(config, "final_logit_softcapping", None) is None
    )


# ---------------------------------------------------------------------------------------------- LM head


def _shifted_exp(
    hidden_C_D: torch.Tensor, weight_V_D: torch.Tensor, targets_C_K: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(exp(logits - max) per row, its row sums, log p(target) for each of a row's K targets) for a chunk of rows.
    Accurate exp, not the faster approximation inside torch.log_softmax's CPU kernel, whose small bias is amplified
    in the gradient of confident tokens (where onehot - softmax is a small difference of large terms)."""
    logits_C_V = matmul_t(hidden_C_D, weight_V_D)
    max_C_1 = logits_C_V.amax(dim=-1, keepdim=True)
    shifted_target_C_K = logits_C_V.gather(1, targets_C_K) - max_C_1
    exp_C_V = logits_C_V.sub_(max_C_1).exp_()
    sum_C = exp_C_V.sum(dim=-1)
    return exp_C_V, sum_C, shifted_target_C_K - sum_C.log()[:, None]


class _HeadLogprobs(torch.autograd.Function):
    """log softmax(h @ W.T)[target] for each of a row's K targets, chunked; the gradient flows to h only (W is
    frozen). The forward keeps each chunk's exp(logits - max) for the backward, which turns it into the logits'
    gradient in place."""

    @staticmethod
    def forward(ctx, hidden_G_D, weight_V_D, targets_G_K):
        logprobs_G_K = torch.empty(targets_G_K.shape, dtype=hidden_G_D.dtype)
        saved = []
        for start in range(0, hidden_G_D.shape[0], HEAD_CHUNK_ROWS):
            end = min(start + HEAD_CHUNK_ROWS, hidden_G_D.shape[0])
            exp_C_V, sum_C, logprobs_G_K[start:end] = _shifted_exp(
                hidden_G_D[start:end], weight_V_D, targets_G_K[start:end]
            )
            saved.append((exp_C_V, sum_C))
        ctx.saved_chunks = saved
        ctx.save_for_backward(weight_V_D, targets_G_K)
        return logprobs_G_K

    @staticmethod
    def backward(ctx, grad_G_K):
        weight_V_D, targets_G_K = ctx.saved_tensors
        chunks, ctx.saved_chunks = ctx.saved_chunks, None
        if chunks is None:
            raise RuntimeError(
                "the LM-head log-probabilities were already back-propagated once (retain_graph is "
                "not supported on this path)"
            )
        grad_hidden = []
        start = 0
        for exp_C_V, sum_C in chunks:
            end = start + exp_C_V.shape[0]
            g_C_K = grad_G_K[start:end]
            # d logp[target] / d logits = onehot(target) - softmax, softmax = exp / sum, summed over the K targets
            grad_logits_C_V = exp_C_V.mul_((-g_C_K.sum(dim=-1) / sum_C)[:, None])
            grad_logits_C_V.scatter_add_(1, targets_G_K[start:end], g_C_K)
            grad_hidden.append(matmul_t(grad_logits_C_V, weight_V_D.t()))
            start = end
        return torch.cat(grad_hidden), None, None


@torch.no_grad()
def _head_logprobs_no_grad(
    hidden_N_D: torch.Tensor, weight_V_D: torch.Tensor, targets_N_K: torch.Tensor
) -> torch.Tensor:
    logprobs_N_K = torch.empty(targets_N_K.shape, dtype=hidden_N_D.dtype)
    for start in range(0, hidden_N_D.shape[0], HEAD_CHUNK_ROWS):
        end = min(start + HEAD_CHUNK_ROWS, hidden_N_D.shape[0])
        logprobs_N_K[start:end] = _shifted_exp(hidden_N_D[start:end], weight_V_D, targets_N_K[start:end])[2]
    return logprobs_N_K


def head_logprobs(
    hidden_N_D: torch.Tensor, weight_V_D: torch.Tensor, targets_N: torch.Tensor, grad_rows_N: torch.Tensor | None
) -> torch.Tensor:
    """log p(target) per row from final hidden states: targets of shape (N,) give (N,), targets of shape (N, K)
    (several per position: the SDK's top-K cross_entropy) give (N, K). Autograd reaches only the rows in
    `grad_rows_N` (a bool mask; None = none of them)."""
    if hidden_N_D.dtype != torch.float32 or weight_V_D.dtype != torch.float32:  # bf16: the head stays fp32
        hidden_N_D, weight_V_D = hidden_N_D.float(), weight_V_D.float()
    hidden_N_D = hidden_N_D.contiguous()
    targets_N_K = targets_N if targets_N.dim() == 2 else targets_N[:, None]
    if grad_rows_N is None or not hidden_N_D.requires_grad or not bool(grad_rows_N.any()):
        logprobs_N_K = _head_logprobs_no_grad(hidden_N_D.detach(), weight_V_D, targets_N_K)
    else:
        grad_idx = grad_rows_N.nonzero()[:, 0]
        rest_idx = (~grad_rows_N).nonzero()[:, 0]
        logprobs_N_K = torch.zeros(targets_N_K.shape, dtype=hidden_N_D.dtype)
        if len(rest_idx):
            logprobs_N_K[rest_idx] = _head_logprobs_no_grad(
                hidden_N_D.detach()[rest_idx], weight_V_D, targets_N_K[rest_idx]
            )
        picked = _HeadLogprobs.apply(hidden_N_D[grad_idx], weight_V_D.detach(), targets_N_K[grad_idx])
        logprobs_N_K = logprobs_N_K.index_put((grad_idx,), picked)
    return logprobs_N_K if targets_N.dim() == 2 else logprobs_N_K[:, 0]


# -------------------------------------------------------------------------------------------- packed pass


def packed_logprobs(
    model,
    inputs: list[list[int]],
    targets: list[torch.Tensor],
    grad_rows: list[torch.Tensor | None],
    shared_D: list[int] | None = None,
) -> list[torch.Tensor]:
    """Per-sequence log p(target) of a micro-batch run as one packed row. `model` is the causal LM (peft-wrapped or
    not; its adapter state applies as it is); `grad_rows[i]` marks the positions of sequence i that need a
    gradient (None: none); sequences whose first `shared_D[i]` tokens are the same run them once (packing.py).
    Gradients are recorded only when grad mode is on."""
    layout = packing.pack(inputs, shared_D)
    hidden_R_D, weight_V_D = _packed_hidden_of(model, layout)
    shapes = [tuple(t.shape) for t in targets]
    width = max(t.shape[1] if t.dim() == 2 else 0 for t in targets)  # 0: one target a position everywhere
    if width:  # top-K targets in the micro-batch: every sequence gets K columns (its own target repeated), sliced after
        targets = [widened(t.long(), width) for t in targets]
    targets = [t.long() for t in targets]
    with_grad = torch.is_grad_enabled() and any(g is not None for g in grad_rows)
    grads = [g.bool() if g is not None else torch.zeros(len(x), dtype=torch.bool) for g, x in zip(grad_rows, inputs)]
    # The LM head's rows: one per sequence position, except that a group's shared positions are scored once where
    # every member asks the same targets there and none needs a gradient there.
    entries_D: list[torch.Tensor] = []
    rows: list[torch.Tensor] = []
    head_targets: list[torch.Tensor] = []
    head_grads: list[torch.Tensor] = []
    prefix_entries: dict[int, torch.Tensor] = {}  # group leader -> the head rows of its shared positions
    count = 0
    for i, rows_T in enumerate(layout.rows_D):
        shared, leader = layout.shared_D[i], layout.leader_D[i]
        reuse = (
            leader in prefix_entries
            and torch.equal(targets[i][:shared], targets[leader][:shared])
            and not bool(grads[i][:shared].any())
        )
        own_from = shared if reuse else 0
        entries_T = torch.arange(count, count + len(rows_T) - own_from)
        rows.append(rows_T[own_from:])
        head_targets.append(targets[i][own_from:])
        head_grads.append(grads[i][own_from:])
        count += len(rows_T) - own_from
        if reuse:
            entries_T = torch.cat([prefix_entries[leader], entries_T])
        elif shared and i == leader:
            prefix_entries[i] = entries_T[:shared]
        entries_D.append(entries_T)
    rows_H = torch.cat(rows)
    hidden_H_D = hidden_R_D if torch.equal(rows_H, torch.arange(hidden_R_D.shape[0])) else hidden_R_D[rows_H]
    grad_rows_H = torch.cat(head_grads) if with_grad else None
    logprobs_H = head_logprobs(hidden_H_D, weight_V_D, torch.cat(head_targets), grad_rows_H)
    if any(layout.shared_D):
        pieces = [logprobs_H[entries_T] for entries_T in entries_D]
    else:  # nothing shared: the head's rows are the sequences' positions in order
        pieces = list(logprobs_H.split([len(tokens) for tokens in inputs]))
    if width:
        pieces = [p[:, : shape[1]] if len(shape) == 2 else p[:, 0] for p, shape in zip(pieces, shapes)]
    return pieces


def packed_topk(model, inputs: list[list[int]], k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sequence, the k likeliest next tokens at each position and their log-probs ((T, k) log-probs, (T, k) ids,
    likeliest first), from one packed pass without gradients and the fp32 head, with the arithmetic of
    packed_logprobs (a token's log-prob here equals the one packed_logprobs gives it)."""
    with torch.no_grad():
        hidden_N_D, weight_V_D = _packed_hidden(model, inputs)
        hidden_N_D = hidden_N_D.float().contiguous()
        values, ids = [], []
        for start in range(0, hidden_N_D.shape[0], HEAD_CHUNK_ROWS):
            logits_C_V = matmul_t(hidden_N_D[start : start + HEAD_CHUNK_ROWS], weight_V_D.float())
            max_C_1 = logits_C_V.amax(dim=-1, keepdim=True)
            top_C_K, ids_C_K = logits_C_V.topk(min(k, logits_C_V.shape[-1]), dim=-1)
            log_sum_C_1 = logits_C_V.sub_(max_C_1).exp_().sum(dim=-1, keepdim=True).log()
            values.append(top_C_K - max_C_1 - log_sum_C_1)
            ids.append(ids_C_K)
    lengths = [len(tokens) for tokens in inputs]
    return list(zip(torch.cat(values).split(lengths), torch.cat(ids).split(lengths)))


def _packed_hidden(model, inputs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The final hidden states of the sequences run one after another as one packed row, (sum of lengths, D), and
    the LM head's fp32 weight. `model` is the causal LM, peft-wrapped or not; its adapter state applies as it is."""
    return _packed_hidden_of(model, packing.pack(inputs))


def _packed_hidden_of(model, layout: packing.Packing) -> tuple[torch.Tensor, torch.Tensor]:
    """The final hidden states of a packed row's tokens, (row length, D), and the LM head's fp32 weight."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = causal_lm.get_decoder()
    weight_V_D = fp32_head_weight(causal_lm.get_output_embeddings())  # bf16 models: the head's cached fp32 copy
    ids_1_R = torch.tensor([layout.ids], dtype=torch.long)
    positions_1_R = torch.tensor([layout.positions], dtype=torch.long)
    with _attention(causal_lm.config, PACKED_ATTENTION):
        hidden_1_R_D = decoder(
            input_ids=ids_1_R, position_ids=positions_1_R, use_cache=False, packed_segments=layout.segments
        ).last_hidden_state
    return hidden_1_R_D[0], weight_V_D


def widened(targets_T: torch.Tensor, width: int) -> torch.Tensor:
    """(T,) or (T, K) targets as (T, width), the last column repeated: the extra columns carry no loss weight."""
    targets_T_K = targets_T if targets_T.dim() == 2 else targets_T[:, None]
    return torch.cat([targets_T_K, targets_T_K[:, -1:].expand(-1, width - targets_T_K.shape[1])], dim=1)


_register_packed_attention()
