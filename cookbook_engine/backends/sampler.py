"""Token sampling for the local backend: one or several prompts, N samples each, temperature / top-k / top-p,
stops, seeds.

Each prompt is prefilled once and its key/value cache shared by its N samples; the rows of every prompt of a call
(`sample_many`: an evaluation's prompts, several RL groups) then decode together as one batch, each prompt drawing
from its own seeded generator so its tokens do not depend on its batch-mates. Rows that stop are dropped from
the batch so finished samples cost nothing. Returned log-probabilities are the model's
own (temperature 1, before top-k/top-p), the quantity the trainer computes, so on-policy importance ratios start at
1. Stop handling follows the SDK: `stop=None` stops on EOS, `[]` never stops early, stop may be token ids or
strings, and a sequence includes its stop token exactly once.

Two decoders behind one loop: for Llama-architecture models `fast_decode.MergedLlama` (LoRA merged into a weight
copy built once per sampler snapshot and cached, the MERGED_CACHE_SIZE most recently used per model, ~0.5 GB each for
the default model, so the base model, a run's sampler and a chat snapshot can alternate; fused projections; a
KV cache preallocated for prompt + max_tokens); for anything else the model's own forward with transformers'
cache. Token choice is exact either way: top-p looks at a top-k shortlist
first and falls back to sorting the whole vocabulary for any row whose shortlist holds less than top_p of the
probability, so the kept set is always the one the full sort gives (tests/test_fast_paths.py checks it). Sampling
draws one uniform number per row and walks the kept tokens in descending probability, so both routes pick the same
token for the same seed. This module is decoding only: it knows nothing of adapters, clients or queues.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import torch
from tinker import types

from cookbook_engine.backends import fast_decode, fast_ops

TOP_P_SHORTLIST = 64  # tokens looked at before sorting the whole vocabulary (exact: see nucleus())
BASE_WEIGHTS = "base-weights"  # weights_key of the base model without adapter (its weights never change)

MAX_BATCH_ROW_TOKENS = 16384  # rows x (longest prompt + max_tokens) decoded together: ~0.75 GB of KV cache for the
# default model; more prompts than that are decoded in several batches (one prompt's own samples always together)
MERGED_CACHE_SIZE = 3  # fast decoders kept per model (least recently used dropped first)
_merged_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> OrderedDict(weights_key -> decoder)


@dataclass
class SampledRow:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: Literal["stop", "length"]


def target_logprobs(logits_B_T_V: torch.Tensor, targets_B_T: torch.Tensor) -> torch.Tensor:
    """log p(target) at each position, without materialising the full log-softmax twice; targets of shape
    (B, T, K) (several a position: the SDK's top-K cross_entropy) give (B, T, K)."""
    if targets_B_T.dim() == logits_B_T_V.dim():
        return logits_B_T_V.gather(-1, targets_B_T) - torch.logsumexp(logits_B_T_V, dim=-1, keepdim=True)
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


# ------------------------------------------------------------------------------------------- choosing tokens


def nucleus_sorted(scores_B_V: torch.Tensor, top_k: int, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: (kept probabilities, their token ids), both B x K in descending probability, from sorting
    the whole vocabulary. top_k keeps the k highest scores (0: all); top_p then drops a token when the tokens before
    it already hold top_p of the probability (the first always stays). Dropped entries have probability 0."""
    sorted_B_V, ids_B_V = torch.sort(scores_B_V, dim=-1, descending=True)
    if top_k:
        sorted_B_V, ids_B_V = sorted_B_V[:, :top_k], ids_B_V[:, :top_k]
    probs_B_V = torch.softmax(sorted_B_V, dim=-1)
    if top_p < 1.0:
        before_B_V = probs_B_V.cumsum(dim=-1) - probs_B_V
        probs_B_V = probs_B_V.masked_fill(before_B_V >= top_p, 0.0)
    return probs_B_V, ids_B_V


def nucleus(
    scores_B_V: torch.Tensor, top_k: int, top_p: float, shortlist: int = TOP_P_SHORTLIST
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as nucleus_sorted, from the `shortlist` highest scores when they suffice. Exact: probabilities
    are normalised over the whole (top-k) vocabulary, and when the shortlist holds at least top_p of it every token
    outside has at least top_p before it, so the full sort would drop it too. Rows whose shortlist holds less are
    sorted in full."""
    vocab = scores_B_V.shape[-1]
    if top_k and top_k <= shortlist:
        return nucleus_sorted_topk(scores_B_V, top_k, top_p)
    size = min(shortlist, vocab)
    values_B_S, ids_B_S = torch.topk(scores_B_V, size, dim=-1)
    if top_k and top_k < vocab:
        logsumexp_B_1 = torch.logsumexp(torch.topk(scores_B_V, top_k, dim=-1).values, dim=-1, keepdim=True)
    else:
        logsumexp_B_1 = torch.logsumexp(scores_B_V, dim=-1, keepdim=True)
    probs_B_S = torch.exp(values_B_S - logsumexp_B_1)
    cumulative_B_S = probs_B_S.cumsum(dim=-1)
    probs_B_S = probs_B_S.masked_fill(cumulative_B_S - probs_B_S >= top_p, 0.0)
    short_rows = (cumulative_B_S[:, -1] < top_p).nonzero()[:, 0]
    if len(short_rows) == 0 or size == vocab:
        return probs_B_S, ids_B_S
    full_probs, full_ids = nucleus_sorted(scores_B_V[short_rows], top_k, top_p)
    probs = torch.zeros(scores_B_V.shape[0], full_probs.shape[-1])
    ids = torch.zeros(scores_B_V.shape[0], full_probs.shape[-1], dtype=torch.long)
    probs[:, :size], ids[:, :size] = probs_B_S, ids_B_S
    probs[short_rows], ids[short_rows] = full_probs, full_ids
    return probs, ids


def nucleus_sorted_topk(scores_B_V: torch.Tensor, top_k: int, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """top_k small enough to take directly: the k highest, in order, then top_p among them."""
    values_B_K, ids_B_K = torch.topk(scores_B_V, top_k, dim=-1)
    probs_B_K = torch.softmax(values_B_K, dim=-1)
    if top_p < 1.0:
        probs_B_K = probs_B_K.masked_fill(probs_B_K.cumsum(dim=-1) - probs_B_K >= top_p, 0.0)
    return probs_B_K, ids_B_K


def pick(probs_B_K: torch.Tensor, ids_B_K: torch.Tensor, uniform_B: torch.Tensor) -> torch.Tensor:
    """The token whose cumulative-probability interval holds uniform * total, walking the kept tokens in order."""
    cumulative_B_K = probs_B_K.double().cumsum(dim=-1)
    target_B_1 = (uniform_B.double() * cumulative_B_K[:, -1])[:, None]
    index_B_1 = torch.searchsorted(cumulative_B_K, target_B_1, right=True)
    last_kept_B_1 = cumulative_B_K.argmax(dim=-1, keepdim=True)  # first index reaching the total
    return ids_B_K.gather(1, torch.minimum(index_B_1, last_kept_B_1))[:, 0]


def choose_next(
    logits_B_V: torch.Tensor,
    params: types.SamplingParams,
    generator: torch.Generator | None,
    shortlist: int = TOP_P_SHORTLIST,
    uniform_B: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pick one token per row from raw logits under temperature, top_k and top_p, with one uniform number per row
    (`uniform_B`, or drawn from `generator`)."""
    if params.temperature <= 0:
        return logits_B_V.argmax(dim=-1)
    scores_B_V = logits_B_V / params.temperature
    vocab = scores_B_V.shape[-1]
    top_k = params.top_k if params.top_k and 0 < params.top_k < vocab else 0
    if uniform_B is None:
        uniform_B = torch.rand(scores_B_V.shape[0], generator=generator, dtype=torch.float64)
    if params.top_p < 1.0:
        probs_B_K, ids_B_K = nucleus(scores_B_V, top_k, params.top_p, shortlist)
    elif top_k:
        values_B_K, ids_B_K = torch.topk(scores_B_V, top_k, dim=-1)
        probs_B_K = torch.softmax(values_B_K, dim=-1)
    else:
        probs_B_K, ids_B_K = torch.softmax(scores_B_V, dim=-1), torch.arange(vocab).expand(scores_B_V.shape[0], -1)
    return pick(probs_B_K, ids_B_K, uniform_B)


# ------------------------------------------------------------------------------------------------- decoding


def merged_weights(model, weights_key) -> fast_decode.MergedLlama | None:
    """The fast decoder for the model's current adapter state, reused while `weights_key` is the same object
    (a sampler snapshot, or BASE_WEIGHTS). None: the model's own forward must be used. The most recently used
    decoders are kept, so alternating weights (chat side by side, a run's sampler beside the base) rebuild nothing."""
    cache = _merged_cache.setdefault(model, OrderedDict())  # id(key) -> (key, decoder): the key is held, so its
    if weights_key is not None and id(weights_key) in cache:  # id cannot be reused while it is cached
        cache.move_to_end(id(weights_key))
        return cache[id(weights_key)][1]
    evicted = max(0, len(cache) - MERGED_CACHE_SIZE + 1)
    for _ in range(evicted):
        cache.popitem(last=False)  # free the oldest copies before building the new one
    if evicted:
        return_freed_memory()
    merged = fast_decode.MergedLlama.from_model(model)
    if merged is not None and weights_key is not None:
        cache[id(weights_key)] = (weights_key, merged)
    return merged


def _glibc_malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return None


_malloc_trim = _glibc_malloc_trim()


def return_freed_memory() -> None:
    """Give the pages of freed heap memory back to the OS (glibc's malloc_trim; elsewhere nothing). A decoder is
    ~550 MB in a few hundred blocks of 1-7 MB, below glibc's mmap threshold once it has risen, so they live in the
    heap of whichever thread built them; freed, they stayed resident and the next decoder went elsewhere:
    `cookbook serve` grew ~50 MB a session over 20 SDK sessions each sampling new weights (+741 MB from session 5
    to 20; +192 MB with this, as without the fast decoder; benchmarks/serve_soak.py, tests/test_serve_soak.py). It
    costs 40-90 ms per eviction against a 0.3 s decoder build (an RL step builds one; measured on the AMD EPYC)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


@dataclass
class Request:
    """One prompt and how to sample it: `num_samples` rows, each decoded until a stop or max_tokens."""

    prompt_tokens: list[int]
    num_samples: int
    params: types.SamplingParams
    include_prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0  # > 0: the k likeliest tokens and their log-probs at every prompt position


class _Group:
    """A request while it decodes: its limits, stops, seeded generator and rows."""

    def __init__(self, request: Request, tokenizer, max_context: int):
        prompt = request.prompt_tokens
        if not prompt:
            raise ValueError("sample: the prompt is empty")
        if request.num_samples < 1:
            raise ValueError("sample: num_samples must be at least 1")
        room = max_context - len(prompt)
        if room <= 0:
            raise ValueError(f"sample: the prompt has {len(prompt)} tokens, the context holds {max_context}")
        params = request.params
        self.request, self.tokenizer = request, tokenizer
        self.max_tokens = min(params.max_tokens or min(room, 512), room)
        self.stop_ids, self.stop_strings = resolve_stops(params.stop, tokenizer)
        self.generator = torch.Generator()
        if params.seed is not None:
            self.generator.manual_seed(int(params.seed))
        else:
            self.generator.seed()
        self.rows = [SampledRow([], [], "length") for _ in range(request.num_samples)]
        self.prompt_logprobs: list[float | None] | None = None
        self.choice_key = (params.temperature, params.top_k, params.top_p)  # what choose_next reads besides seeds


@torch.inference_mode()
def sample(
    model,
    tokenizer,
    prompt_tokens: list[int],
    num_samples: int,
    params: types.SamplingParams,
    include_prompt_logprobs: bool = False,
    max_context: int = 8192,
    weights_key=None,
) -> tuple[list[SampledRow], list[float | None] | None]:
    """`weights_key` names the weights the model holds now (same object = same weights), so the fast decoder's
    merged copy is built once per sampler snapshot; None builds it afresh."""
    request = Request(prompt_tokens, num_samples, params, include_prompt_logprobs)
    return sample_many(model, tokenizer, [request], max_context, weights_key)[0]


@torch.inference_mode()
def sample_many(
    model, tokenizer, requests: list[Request], max_context: int = 8192, weights_key=None
) -> list[tuple[list[SampledRow], list[float | None] | None]]:
    """(rows, prompt log-probs) per request. On the fast decoder all requests decode as one batch (one matmul per
    layer for every row of every prompt); on the model's own forward one request after another. Each request draws
    from its own seeded generator, so its rows get the tokens they would get if it were sampled alone."""
    groups = [_Group(request, tokenizer, max_context) for request in requests]
    merged = merged_weights(model, weights_key)
    if merged is None:
        for group in groups:
            _decode(_ModelDecoder(model), [group])
    else:  # shortest first, so that a batch's prompts are of like lengths (its prefill pads each to its longest)
        by_length = sorted(groups, key=lambda group: len(group.request.prompt_tokens) + group.max_tokens)
        for batch in _batches(by_length):
            _decode(_MergedDecoder(merged), batch)
    return [(group.rows, group.prompt_logprobs) for group in groups]


def _batches(groups: list[_Group]) -> list[list[_Group]]:
    """Consecutive groups, as many per batch as fit MAX_BATCH_ROW_TOKENS (at least one)."""
    batches: list[list[_Group]] = []
    longest = rows = 0
    for group in groups:
        size = len(group.request.prompt_tokens) + group.max_tokens
        grown_longest, grown_rows = max(longest, size), rows + group.request.num_samples
        if batches and grown_longest * grown_rows <= MAX_BATCH_ROW_TOKENS:
            batches[-1].append(group)
            longest, rows = grown_longest, grown_rows
        else:
            batches.append([group])
            longest, rows = size, group.request.num_samples
    return batches


def _decode(decoder, groups: list[_Group]) -> None:
    """The decode loop. A row that stops stays in the batch, its outputs ignored, until a quarter of the batch has
    stopped: then the finished rows are dropped from the KV cache at once (a copy of the whole cache, too dear to
    make at each of the many steps where some row of a big batch stops)."""
    logits_B_V = decoder.prefill(groups)
    slots = [(group, row) for group in groups for row in group.rows]  # the group and row of each batch slot
    live = list(range(len(slots)))  # the slots still decoding
    for _ in range(max(group.max_tokens for group in groups)):
        logits_L_V = logits_B_V if len(live) == len(slots) else logits_B_V[live]
        next_L = _choose(logits_L_V, [slots[slot] for slot in live])
        logprob_L = logits_L_V.gather(-1, next_L[:, None])[:, 0] - torch.logsumexp(logits_L_V, dim=-1)
        keep = []
        for index, slot in enumerate(live):
            group, row = slots[slot]
            token = int(next_L[index])
            row.tokens.append(token)
            row.logprobs.append(float(logprob_L[index]))
            if token in group.stop_ids or (
                group.stop_strings and _ends_with_stop(group.tokenizer, row.tokens, group.stop_strings)
            ):
                row.stop_reason = "stop"
            elif len(row.tokens) < group.max_tokens:
                keep.append(slot)
        if not keep:
            break
        next_B = (
            next_L
            if len(live) == len(slots)
            else torch.zeros(len(slots), dtype=next_L.dtype).index_put_((torch.tensor(live),), next_L)
        )
        live = keep
        if 4 * (len(slots) - len(live)) >= len(slots):
            decoder.keep_rows(live)
            next_B = next_B[live]
            slots = [slots[slot] for slot in live]
            live = list(range(len(slots)))
        logits_B_V = decoder.step(next_B)


def _choose(logits_B_V: torch.Tensor, live: list[tuple[_Group, SampledRow]]) -> torch.Tensor:
    """The next token of every slot: one choose_next per kind of sampling parameters, each group's uniform numbers
    from its own generator (its slots are consecutive)."""
    by_key: dict[tuple, list[int]] = {}
    for slot, (group, _) in enumerate(live):
        by_key.setdefault(group.choice_key, []).append(slot)
    next_B = None
    for slots in by_key.values():
        group = live[slots[0]][0]
        uniform = None
        if group.request.params.temperature > 0:
            runs = itertools.groupby(slots, key=lambda slot: live[slot][0])
            uniform = torch.cat(
                [torch.rand(len(list(run)), generator=g.generator, dtype=torch.float64) for g, run in runs]
            )
        if len(slots) == len(live):
            return choose_next(logits_B_V, group.request.params, None, uniform_B=uniform)
        picked = choose_next(logits_B_V[slots], group.request.params, None, uniform_B=uniform)
        if next_B is None:
            next_B = torch.empty(len(live), dtype=picked.dtype)
        next_B[slots] = picked
    assert next_B is not None
    return next_B


class _MergedDecoder:
    """Decoding on fast_decode.MergedLlama with a preallocated cache. Several prompts share the batch: they are
    prefilled together, right-aligned so that every decode step writes one cache column for all rows; a shorter
    prompt's rows mask the columns before it and take their rotary positions from their own start."""

    def __init__(self, merged: fast_decode.MergedLlama):
        self.merged = merged

    def prefill(self, groups: list[_Group]) -> torch.Tensor:
        longest = max(len(g.request.prompt_tokens) for g in groups)
        capacity = longest + max(g.max_tokens for g in groups)
        counts = [g.request.num_samples for g in groups]
        self.cache = self.merged.new_cache(sum(counts), capacity)
        self.cos, self.sin = self.merged.rope_table(capacity)
        offsets = [longest - len(g.request.prompt_tokens) for g in groups]
        prompts_P_T = torch.tensor(
            [[g.request.prompt_tokens[0]] * offset + g.request.prompt_tokens for g, offset in zip(groups, offsets)],
            dtype=torch.long,
        )
        rows_B = None if len(groups) == 1 else torch.repeat_interleave(torch.arange(len(groups)), torch.tensor(counts))
        hidden_P_T_D = self.merged.prefill(prompts_P_T, offsets, rows_B, self.cache, self.cos, self.sin)
        for index, (group, offset) in enumerate(zip(groups, offsets)):
            if group.request.include_prompt_logprobs:
                lp = fast_ops.head_logprobs(
                    hidden_P_T_D[index, offset:-1], self.merged.head_plain, prompts_P_T[index, offset + 1 :], None
                )
                group.prompt_logprobs = [None, *lp.tolist()]
        logits_P_V = self.merged.logits(hidden_P_T_D[:, -1])
        self.column = longest
        self.offsets_B = torch.tensor([offset for offset, count in zip(offsets, counts) for _ in range(count)])
        self.ragged = any(offsets)
        self.key_mask_B_C = torch.arange(capacity)[None] >= self.offsets_B[:, None] if self.ragged else None
        return logits_P_V.expand(counts[0], -1) if rows_B is None else logits_P_V.index_select(0, rows_B)

    def keep_rows(self, slots: list[int]) -> None:
        self.cache.keep_rows(slots)
        self.offsets_B = self.offsets_B[slots]
        if self.key_mask_B_C is not None:
            self.key_mask_B_C = self.key_mask_B_C[slots]

    def step(self, tokens_B: torch.Tensor) -> torch.Tensor:
        positions_B = self.column - self.offsets_B if self.ragged else None
        hidden_B_D = self.merged.step(
            tokens_B, self.cache, self.column, positions_B, self.key_mask_B_C, self.cos, self.sin
        )
        self.column += 1
        return self.merged.logits(hidden_B_D)


class _ModelDecoder:
    """Decoding on the model's own forward and transformers' cache (any architecture), one request at a time."""

    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device  # tokens go there; logits come back to the CPU, where the
        # sampling decisions run with the call's seeded CPU generator

    def prefill(self, groups: list[_Group]) -> torch.Tensor:
        (group,) = groups
        prompt_1_T = torch.tensor([group.request.prompt_tokens], dtype=torch.long, device=self.device)
        out = self.model(input_ids=prompt_1_T, use_cache=True)
        if group.request.include_prompt_logprobs:
            lp = target_logprobs(out.logits[:, :-1].float(), prompt_1_T[:, 1:])[0].cpu().tolist()
            group.prompt_logprobs = [None, *lp]
        self.cache = out.past_key_values
        rows = group.request.num_samples
        if rows > 1:
            self.cache.batch_repeat_interleave(rows)
        return out.logits[:, -1].float().cpu().expand(rows, -1)

    def keep_rows(self, slots):
        self.cache.batch_select_indices(torch.tensor(slots, device=self.device))

    def step(self, tokens_B):
        out = self.model(input_ids=tokens_B[:, None].to(self.device), past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        return out.logits[:, -1].float().cpu()


def _ends_with_stop(tokenizer, tokens: list[int], stop_strings: list[str]) -> bool:
    longest = max(len(s) for s in stop_strings)
    tail = tokenizer.decode(tokens[-(longest + 8) :], skip_special_tokens=False)
    return any(s in tail for s in stop_strings)
