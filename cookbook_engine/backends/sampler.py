"""Token sampling for the local backend: one prompt, N samples, temperature / top-k / top-p, stops, seeds.

The prompt is prefilled once and its key/value cache repeated for the N samples, which then decode together;
rows that stop are dropped from the batch so finished samples cost nothing. Returned log-probabilities are the
model's own (temperature 1, before top-k/top-p), the quantity the trainer computes, so on-policy importance
ratios start at 1. Stop handling follows the SDK: `stop=None` stops on EOS, `[]` never stops early, stop may be
token ids or strings, and a sequence includes its stop token exactly once. This module is decoding only: it knows
nothing of adapters, clients or queues.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tinker import types


@dataclass
class SampledRow:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" | "length"


def target_logprobs(logits_B_T_V: torch.Tensor, targets_B_T: torch.Tensor) -> torch.Tensor:
    """log p(target) at each position, without materialising the full log-softmax twice."""
    picked = logits_B_T_V.gather(-1, targets_B_T.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits_B_T_V, dim=-1)


def resolve_stops(stop, tokenizer) -> tuple[set[int], list[str]]:
    if stop is None:
        return {tokenizer.eos_token_id}, []
    if isinstance(stop, str):
        return set(), [stop]
    stop = list(stop)
    if all(isinstance(s, int) for s in stop):
        return set(stop), []
    if all(isinstance(s, str) for s in stop):
        return set(), stop
    raise ValueError("sampling_params.stop must be a string, a list of strings or a list of token ids")


def choose_next(logits_B_V: torch.Tensor, params: types.SamplingParams, generator: torch.Generator) -> torch.Tensor:
    """Pick one token per row from raw logits under temperature, top_k and top_p."""
    if params.temperature <= 0:
        return logits_B_V.argmax(dim=-1)
    scores = logits_B_V / params.temperature
    if params.top_k and params.top_k > 0 and params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
        # drop a token when the tokens before it already reach top_p (the first token always stays)
        drop_sorted = (cumulative - torch.softmax(sorted_scores, dim=-1)) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, sorted_idx, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def sample(model, tokenizer, prompt_tokens: list[int], num_samples: int, params: types.SamplingParams,
           include_prompt_logprobs: bool = False, max_context: int = 8192
           ) -> tuple[list[SampledRow], list[float | None] | None]:
    if not prompt_tokens:
        raise ValueError("sample: the prompt is empty")
    if num_samples < 1:
        raise ValueError("sample: num_samples must be at least 1")
    room = max_context - len(prompt_tokens)
    if room <= 0:
        raise ValueError(f"sample: the prompt has {len(prompt_tokens)} tokens, the context holds {max_context}")
    max_tokens = min(params.max_tokens or min(room, 512), room)
    stop_ids, stop_strings = resolve_stops(params.stop, tokenizer)
    generator = torch.Generator()
    if params.seed is not None:
        generator.manual_seed(int(params.seed))
    else:
        generator.seed()

    prompt = torch.tensor([prompt_tokens], dtype=torch.long)
    out = model(input_ids=prompt, use_cache=True)
    prompt_logprobs = None
    if include_prompt_logprobs:
        lp = target_logprobs(out.logits[:, :-1].float(), prompt[:, 1:])[0].tolist()
        prompt_logprobs = [None, *lp]
    cache = out.past_key_values
    logits_B_V = out.logits[:, -1].float().expand(num_samples, -1)
    if num_samples > 1:
        cache.batch_repeat_interleave(num_samples)

    rows = [SampledRow([], [], "length") for _ in range(num_samples)]
    live = list(range(num_samples))  # row index of each batch slot still decoding
    for step in range(max_tokens):
        next_B = choose_next(logits_B_V, params, generator)
        logprob_B = torch.log_softmax(logits_B_V, dim=-1).gather(-1, next_B[:, None]).squeeze(-1)
        keep = []
        for slot, row_idx in enumerate(live):
            row, token = rows[row_idx], int(next_B[slot])
            row.tokens.append(token)
            row.logprobs.append(float(logprob_B[slot]))
            if token in stop_ids or (stop_strings and _ends_with_stop(tokenizer, row.tokens, stop_strings)):
                row.stop_reason = "stop"
            else:
                keep.append(slot)
        if not keep or step == max_tokens - 1:
            break
        if len(keep) < len(live):
            cache.batch_select_indices(torch.tensor(keep))
            next_B = next_B[keep]
            live = [live[slot] for slot in keep]
        out = model(input_ids=next_B[:, None], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits_B_V = out.logits[:, -1].float()
    return rows, prompt_logprobs


def _ends_with_stop(tokenizer, tokens: list[int], stop_strings: list[str]) -> bool:
    longest = max(len(s) for s in stop_strings)
    tail = tokenizer.decode(tokens[-(longest + 8):], skip_special_tokens=False)
    return any(s in tail for s in stop_strings)
