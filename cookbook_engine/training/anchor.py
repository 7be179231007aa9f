"""The anchor: ordinary chats a run keeps answering as the base model does (`anchor.dataset=builtin:replay`).

Every step of an SL, DPO or RL run also trains `anchor.rows` of these chats, each reply position toward the base
model's own next-token distribution: its top-K tokens with their probabilities as weights (Tinker's top-K form of
`cross_entropy`, the targets from a base-model `sample(..., topk_prompt_logprobs=K)`, asked the first time a step
trains the chat). This is Learning without
Forgetting (Li and Hoiem 2016) on ordinary text: while the model still is the base model the anchor's gradient is
small (only the base model's tail, the few percent of probability outside its top K, is drawn toward those K: about
a fifth of the same chats' gradient as plain rows, tests/test_anchor.py), and it grows where the run's own data
pulls the model away. Replay rows of the base model's greedy replies, trained as plain SL rows, instead pull the
model toward its own greedy tokens and sharpen it (docs/DEFAULTS.md measured both). Everything goes through the
SDK's calls, so it runs on both backends.

The anchor's forward_backward is queued beside the step's own, before its optim_step, so their gradients add up in
one optimizer step. `anchor/kl` is the truncated forward KL (base || model) over the anchor rows' top-K tokens, per
reply token: 0 while the model answers them as the base model does.

Not here: the setting's description (config.AnchorConfig), the loops (sl/, dpo/, rl/loop.py call `submit`).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from tinker import types

from cookbook_engine import renderers
from cookbook_engine.data import loading as datasets
from cookbook_engine.training import reference
from cookbook_engine.training.common import tokenizer_for

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import ResultFuture, SamplingClient, ServiceClient, TrainingClient
    from cookbook_engine.config import CommonConfig

ANCHOR_TOP_K = 20  # the base model's top 20 tokens hold nearly all its probability on its own replies


def conversations(config: CommonConfig) -> list[list[dict]]:
    """The anchor's chats (every row; none held out), or [] when the run has no anchor. A bad dataset raises the
    loader's DatasetError, naming the setting: preflight calls this before a run exists."""
    spec = anchor_dataset(config)
    if not spec:
        return []
    try:
        return list(datasets.load_chat_dataset(spec, test_fraction=0.0).train)
    except datasets.DatasetError as exc:
        raise datasets.DatasetError(f"anchor.dataset={spec}: {exc}") from exc


def anchor_dataset(config: CommonConfig) -> str:
    settings = getattr(config, "anchor", None)
    return settings.dataset.strip() if settings is not None else ""


@dataclass
class Anchor:
    """A run's anchor chats (rendered) and, for those scored so far, their datums (top-K targets weighted by coef x
    the base model's probabilities) and the base model's log-probs of those targets (for anchor/kl). A chat is
    scored by the base model once, before the first step that trains it (asked for while the step before trains:
    `prefetch`), so a run pays for the chats it uses, spread over its steps, not for the whole set before its first
    step (292 chats: about a minute on a 2-core CPU)."""

    examples: list[tuple[list[int], list[float]]]  # (tokens, loss weights) per chat
    rows: int
    coef: float
    base: SamplingClient | None  # the base model's sampler (None: every chat must be given scored)
    cursor: int = 0  # where the next optimizer step's rows start (a resumed run starts at its step's)
    data: dict[int, types.Datum] = field(default_factory=dict)
    base_logprobs: dict[int, np.ndarray] = field(default_factory=dict)  # per datum, (N, K); 0 where no weight

    _prefetch: asyncio.Task | None = field(default=None, init=False, repr=False)  # the next step's chats, scoring

    def next_batch(self) -> list[int]:
        """Indices of the chats the next optimizer step trains: the rows taken in turn, wrapping around."""
        indices = self.upcoming()
        self.cursor += len(indices)
        return indices

    def upcoming(self) -> list[int]:
        """The indices next_batch will give, without taking them."""
        return [(self.cursor + i) % len(self.examples) for i in range(min(self.rows, len(self.examples)))]

    def prefetch(self) -> None:
        """Start scoring the next step's chats now, so that the step finds them scored: on a hosted backend the
        request goes out with this step's training requests instead of costing the next step a round trip."""
        if self.base is not None and self._prefetch is None and any(i not in self.data for i in self.upcoming()):
            self._prefetch = asyncio.ensure_future(self.datums(self.upcoming()))

    async def datums(self, indices: list[int]) -> list[types.Datum]:
        """The datums of these chats, scoring by the base model (one request each, sent together) those not yet
        scored."""
        if self._prefetch is not None and not self._prefetch.done() and asyncio.current_task() is not self._prefetch:
            await self._prefetch
        if self._prefetch is not None and self._prefetch.done():
            prefetched, self._prefetch = self._prefetch, None
            if not prefetched.cancelled():  # cancelled: its event loop ended (the chats are scored again below)
                prefetched.result()  # its failure (a backend error) is this step's
        missing = sorted({i for i in indices if i not in self.data})
        if missing:
            if self.base is None:
                raise ValueError("the anchor has no base-model sampler to score its chats with")
            responses = await asyncio.gather(*[self._score(self.examples[i][0]) for i in missing])
            for i, response in zip(missing, responses):
                tokens, weights = self.examples[i]
                self.data[i], self.base_logprobs[i] = datum_toward(
                    tokens, weights, response.topk_prompt_logprobs, self.coef
                )
        return [self.data[i] for i in indices]

    async def _score(self, tokens: list[int]) -> types.SampleResponse:
        assert self.base is not None
        return await self.base.sample_async(
            prompt=types.ModelInput.from_ints(tokens),
            num_samples=1,
            sampling_params=types.SamplingParams(max_tokens=1, temperature=1.0),
            topk_prompt_logprobs=ANCHOR_TOP_K,
        )


async def build(config: CommonConfig, service: ServiceClient, start_step: int = 0) -> Anchor | None:
    """The anchor of a run (None when it has none, asking nothing of the backend): each chat rendered; the base
    model scores them as steps use them (Anchor.datums)."""
    chats = conversations(config)
    if not chats:
        return None
    renderer = renderers.get_renderer(config.renderer, tokenizer_for(config))
    base = reference.sampling_client_for(service, config.model, reference.BASE)
    examples = []
    for chat in chats:
        tokens, weights = renderer.build_supervised_example(chat, "last_assistant_message")
        examples.append((list(tokens), list(weights)))
    settings = config.anchor  # type: ignore[attr-defined]
    anchor = Anchor(examples, settings.rows, settings.coef, base, cursor=start_step * settings.rows)
    anchor.prefetch()  # the first step's chats, scored while its rollouts or batch are on their way
    return anchor


def datum_toward(
    tokens: list[int], weights: list[float], topk: list[list[tuple[int, float]] | None] | None, coef: float
) -> tuple[types.Datum, np.ndarray]:
    """A top-K cross_entropy datum: at each reply position the base model's K likeliest next tokens, weighted by
    coef x their probability (x the position's own loss weight); and those log-probs, 0 where unweighted."""
    if topk is None or len(topk) != len(tokens):
        raise ValueError(f"the base model gave no top-{ANCHOR_TOP_K} log-probs for an anchor chat")
    n = len(tokens) - 1
    targets_T_K = np.zeros((n, ANCHOR_TOP_K), dtype=np.int64)
    weights_T_K = np.zeros((n, ANCHOR_TOP_K), dtype=np.float32)
    logprobs_T_K = np.zeros((n, ANCHOR_TOP_K), dtype=np.float32)
    for position in range(n):
        row = topk[position + 1] or [(tokens[position + 1], 0.0)]  # position predicts token position + 1
        targets_T_K[position, :] = row[0][0]  # unused columns repeat a target with no weight
        for k, (token, logprob) in enumerate(row[:ANCHOR_TOP_K]):
            targets_T_K[position, k] = token
            if weights[position + 1] > 0:
                weights_T_K[position, k] = coef * weights[position + 1] * math.exp(logprob)
                logprobs_T_K[position, k] = logprob
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(targets_T_K),
            "weights": types.TensorData.from_numpy(weights_T_K),
        },
    )
    return datum, logprobs_T_K


def describe(anchor: Anchor | None, config: CommonConfig) -> str:
    """The run log's words for the anchor ('' without one)."""
    if anchor is None:
        return ""
    settings = config.anchor  # type: ignore[attr-defined]
    return (
        f"; anchored to the base model on {len(anchor.examples)} chats of {settings.dataset} "
        f"({anchor.rows} a step, coef {settings.coef:g})"
    )


@dataclass
class AnchorPass:
    """A step's anchor forward_backward in flight."""

    anchor: Anchor
    indices: list[int]
    future: ResultFuture[types.ForwardBackwardOutput]

    async def metrics(self) -> dict[str, float]:
        """anchor/kl: KL(base || model) over each weighted position's top-K tokens, both renormalised over those K
        (so never below zero), averaged over the positions."""
        output = await self.future
        kl_sum, positions = 0.0, 0
        for index, out in zip(self.indices, output.loss_fn_outputs):
            weighted_T = self.anchor.data[index].loss_fn_inputs["weights"].to_numpy().sum(axis=1) > 0
            base_T_K = _renormalised(self.anchor.base_logprobs[index][weighted_T])
            model_T_K = _renormalised(out["logprobs"].to_numpy()[weighted_T])
            kl_sum += float((np.exp(base_T_K) * (base_T_K - model_T_K)).sum())
            positions += int(weighted_T.sum())
        return {"anchor/kl": kl_sum / max(positions, 1)}


def _renormalised(logprobs_T_K: np.ndarray) -> np.ndarray:
    top_T_1 = logprobs_T_K.max(axis=1, keepdims=True)
    return logprobs_T_K - (top_T_1 + np.log(np.exp(logprobs_T_K - top_T_1).sum(axis=1, keepdims=True)))


async def submit(client: TrainingClient, anchor: Anchor | None) -> AnchorPass | None:
    """Queue the anchor's forward_backward for the optimizer step about to be queued; None without an anchor."""
    if anchor is None:
        return None
    indices = anchor.next_batch()
    future = await client.forward_backward_async(await anchor.datums(indices), "cross_entropy")
    anchor.prefetch()
    return AnchorPass(anchor, indices, future)
