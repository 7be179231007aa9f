"""Greedy replies to many prompts at once (left-padded batches through transformers' generate), for the measurements
that must ask hundreds of questions on a 2-core CPU: the one-time filtering of the retention candidates
(scripts/build_retention.py) and the SFT replay sweep (benchmarks/sft_retention_sweep.py).

The evaluator (evals/evaluators.py) asks one prompt at a time through the local sampler, which is what the studio
and the learning report use; this batched path builds the same prompts with the same renderer and grades with the
same graders, but is several times faster. Left padding can change a greedy choice where two tokens are within
fp32 rounding, so a number from here is checked with the evaluator before it is reported.
"""

from __future__ import annotations

import torch


class _Fp32Head(torch.nn.Module):
    """A bf16 model's LM head computed in fp32, as the local backend does (fast_ops.FrozenHead): bf16 logits round
    near-ties into ties and flip greedy replies."""

    def __init__(self, head: torch.nn.Module):
        super().__init__()
        self.weight32 = head.weight.detach().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.float(), self.weight32)


def load(adapter: str | None = None, dtype: torch.dtype = torch.float32):
    """(model, tokenizer, renderer) of the default model, with a run's PEFT adapter folder applied when given; in
    bf16 the LM head stays fp32, as in the local backend."""
    from cookbook_engine import models
    from cookbook_engine.renderers import get_renderer

    model = models.load_model(models.DEFAULT_MODEL)
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    if dtype != torch.float32:
        head = _Fp32Head(model.lm_head)
        model = model.to(dtype)
        model.lm_head = head
    model.eval()
    return model, tokenizer, get_renderer("auto", tokenizer)


@torch.inference_mode()
def replies(
    model, tokenizer, renderer, prompts: list[str], max_tokens: int, batch_size: int = 32, temperature: float = 0.0
) -> list[str]:
    """One reply per prompt: greedy, or sampled at `temperature` (seed torch first for a repeatable draw)."""
    stops = [s for s in renderer.get_stop_sequences() if isinstance(s, int)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        batch = [
            renderer.build_generation_prompt([{"role": "user", "content": p}]).to_ints()
            for p in prompts[start : start + batch_size]
        ]
        width = max(len(t) for t in batch)
        ids = torch.tensor([[pad] * (width - len(t)) + t for t in batch])
        mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in batch])
        generated = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_tokens,
            do_sample=temperature > 0,
            **({"temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 else {}),
            eos_token_id=stops or None,
            pad_token_id=pad,
        )
        for row in generated[:, width:].tolist():
            tokens = []
            for token in row:
                tokens.append(token)
                if token in stops:
                    break
            out.append(renderer.parse_response(tokens)[0]["content"])
    return out
