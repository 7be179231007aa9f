"""Evaluators: run one model (a sampling client) over one eval set and return metrics with 95% intervals and
one row per example.

Shaped like tinker-cookbook's evaluators. Those that sample (generation, classification) build each prompt with the
renderer, sample through `sample_async` (greedy and seeded by default, `max_tokens` bounded) and grade the reply;
those that score (nll, preference) need only log-probabilities and get them through the sampling client's
`compute_logprobs`, which every checkpoint, the base model and a run's live weights offer. Requests are submitted
together, up to `concurrency` in flight, so the model worker's queue never runs dry while replies are graded.

- generation: graded by rl/graders.py's `grade` (exact, numeric, contains, regex, python_tests). One sample per
  prompt gives `accuracy` (Wilson interval) and, for python_tests, `mean_score` (bootstrap; the share of tests
  passed); samples=K gives `pass@1` and `pass@K` with the unbiased estimator (bootstrap over prompts).
- classification: a label is parsed from the reply (each label searched as a whole word, case ignored; exactly one
  label found -> that label, none or several -> unparseable, counted and shown); accuracy, macro-F1, per-label
  precision/recall, the unparseable share and the confusion matrix.
- preference: the summed log-probability of each side's reply. `accuracy` counts pairs where the model's
  log-likelihood of chosen exceeds rejected's by more than dpo/data.py's TIE_TOLERANCE (strict, as TRL and
  tinker-cookbook count it); `ties` counts the rest within the tolerance; `margin` is the mean difference. With a
  reference client (the base model) the same three are also given on DPO's implicit reward (policy minus reference
  log-ratio): `reward_accuracy`, `reward_ties`, `reward_margin`.
- nll: the mean negative log-likelihood per token of each conversation's last assistant message, token-weighted
  over the set, and its perplexity.
- episodes: each problem of a multi-turn env (rl/multi_turn.py) played as the RL loop plays it, one reply per turn
  (greedy by default), each tool call's result fed back, until the env ends the episode; `accuracy` of the final
  answer (Wilson) and the mean `tool_calls` and `turns` per episode (bootstrap). The row's output is the whole
  episode: each reply and what its tool call returned.

Not here: choosing models, storing results, jobs (targets.py, jobs.py, storage/).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tinker import types

from cookbook_engine.evals import stats
from cookbook_engine.evals.sets import ChatExample, EpisodeExample, EvalSet
from cookbook_engine.renderers import TrainOnWhat
from cookbook_engine.rl import graders, multi_turn

SAMPLING_TEMPERATURE = 0.8  # samples > 1 (pass@k): the temperature unless one is given
SAMPLING_TOP_P = 0.95
# Prompts per decode batch on a client that takes several. Measured on builtin:arithmetic (100 prompts), Intel Xeon with
# AMX, 2026-11-28, examples/s at 32 / 64 / 100: bf16 8.4 / 10.2 / 10.3, fp32 5.4 / 7.6 / 7.1 (benchmarks/README.md).
BATCH_PROMPTS = 64


class EvalCancelled(Exception):
    """The evaluation was asked to stop."""


@dataclass
class EvalSettings:
    max_tokens: int = 0  # 0 = the eval set's own reply budget
    samples: int = 1  # replies per prompt (generation sets); > 1 reports pass@k
    temperature: float | None = None  # None = greedy for one sample, SAMPLING_TEMPERATURE for several
    seed: int = 0
    max_examples: int = 0  # 0 = the whole set
    concurrency: int = 8  # requests in flight

    def check(self) -> None:
        problems = []
        if self.max_tokens < 0:
            problems.append(f"max_tokens={self.max_tokens}: must be 0 (the set's own) or more")
        if self.samples < 1:
            problems.append(f"samples={self.samples}: must be at least 1")
        if self.temperature is not None and self.temperature < 0:
            problems.append(f"temperature={self.temperature}: must be 0 (greedy) or more")
        if self.max_examples < 0:
            problems.append(f"max_examples={self.max_examples}: must be 0 (all) or more")
        if self.concurrency < 1:
            problems.append(f"concurrency={self.concurrency}: must be at least 1")
        if problems:
            raise ValueError("; ".join(problems))

    def sampling_params(self, eval_set: EvalSet, stop) -> types.SamplingParams:
        temperature = self.temperature
        if temperature is None:
            temperature = 0.0 if self.samples == 1 else SAMPLING_TEMPERATURE
        return types.SamplingParams(
            max_tokens=self.max_tokens or eval_set.max_tokens,
            temperature=temperature,
            top_p=SAMPLING_TOP_P if temperature > 0 else 1.0,
            stop=stop,
            seed=self.seed,
        )


@dataclass
class ExampleRow:
    index: int
    prompt: str
    reference: str
    output: str
    score: float
    correct: bool | None = None
    parsed: str | None = None
    details: dict = field(default_factory=dict)


@dataclass
class EvalResult:
    eval_set: str
    kind: str
    metrics: list[stats.Metric]
    examples: list[ExampleRow]
    seconds: float = 0.0

    def metric(self, name: str) -> stats.Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(f"{self.eval_set}: no metric {name!r}; it has {', '.join(m.name for m in self.metrics)}")


@dataclass
class Progress:
    """Called after each example; `cancelled()` is polled before each request."""

    advance: Callable[[int], None] = lambda count: None
    cancelled: Callable[[], bool] = lambda: False


def resolved_client(client):
    """A client from a client-creation method, which returns a future of it (as in the tinker SDK 0.38)."""
    return client.result() if hasattr(client, "result") else client


async def evaluate(
    client,
    renderer,
    eval_set: EvalSet,
    settings: EvalSettings | None = None,
    progress: Progress | None = None,
    reference_client=None,
) -> EvalResult:
    """Run the evaluator of the set's kind; EvalCancelled when progress.cancelled() turns true."""
    settings = settings or EvalSettings()
    settings.check()
    progress = progress or Progress()
    started = time.perf_counter()
    if eval_set.kind == "generation":
        metrics, rows = await _generation(client, renderer, eval_set, settings, progress)
    elif eval_set.kind == "classification":
        metrics, rows = await _classification(client, renderer, eval_set, settings, progress)
    elif eval_set.kind == "preference":
        metrics, rows = await _preference(client, renderer, eval_set, settings, progress, reference_client)
    elif eval_set.kind == "nll":
        metrics, rows = await _nll(client, renderer, eval_set, settings, progress)
    elif eval_set.kind == "episodes":
        metrics, rows = await _episodes(client, renderer, eval_set, settings, progress)
    else:
        raise ValueError(f"{eval_set.name}: unknown eval set kind {eval_set.kind!r}")
    return EvalResult(eval_set.name, eval_set.kind, metrics, rows, time.perf_counter() - started)


async def _each(items: list, work, settings: EvalSettings, progress: Progress, concurrency: int = 0) -> list:
    """`await work(index, item)` for every item, at most `concurrency` (default settings.concurrency) at a time,
    results in order. An item that is a batch (a list) advances the progress by its length."""
    gate = asyncio.Semaphore(concurrency or settings.concurrency)

    async def one(index: int, item):
        async with gate:
            if progress.cancelled():
                raise EvalCancelled()
            result = await work(index, item)
            progress.advance(len(item) if isinstance(item, list) else 1)
            return result

    tasks = [asyncio.ensure_future(one(i, item)) for i, item in enumerate(items)]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def _replies(client, renderer, prompts: list[str], params: types.SamplingParams, samples: int) -> list[list[str]]:
    """The replies to each prompt: one request for all of them when the client takes several prompts at once (the
    local backend's `sample_many`: one decode batch), else one request per prompt."""
    inputs = [renderer.build_generation_prompt([{"role": "user", "content": prompt}]) for prompt in prompts]
    if hasattr(client, "sample_many_async"):
        responses = await client.sample_many_async(inputs, samples, params)
    else:
        responses = [await client.sample_async(model_input, samples, params) for model_input in inputs]
    return [
        [renderer.parse_response(list(seq.tokens))[0]["content"] for seq in response.sequences]
        for response in responses
    ]


def _batches(client, examples: list) -> list[list]:
    """The examples in the groups the evaluators sample together: BATCH_PROMPTS at a time for a client that decodes
    several prompts in one batch (its worker is busy with one batch while the previous one is graded), one at a
    time otherwise (requests in flight, settings.concurrency of them, keep a remote service busy)."""
    size = BATCH_PROMPTS if hasattr(client, "sample_many_async") else 1
    return [examples[start : start + size] for start in range(0, len(examples), size)]


async def _each_batch(client, examples: list, work, settings: EvalSettings, progress: Progress) -> list:
    """`work(first_index, batch)` -> rows, over `_batches`, results flattened in order."""
    batches = _batches(client, examples)
    concurrency = 2 if batches and len(batches[0]) > 1 else settings.concurrency
    starts = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    results = await _each(batches, lambda i, batch: work(starts[i], batch), settings, progress, concurrency)
    return [row for rows in results for row in rows]


# ------------------------------------------------------------------------------------------------ generation


async def _generation(client, renderer, eval_set, settings, progress):
    params = settings.sampling_params(eval_set, renderer.get_stop_sequences())

    async def work(first: int, batch: list) -> list[ExampleRow]:
        replies_each = await _replies(client, renderer, [e.prompt for e in batch], params, settings.samples)
        return [
            await _generation_row(first + offset, example, replies)
            for offset, (example, replies) in enumerate(zip(batch, replies_each))
        ]

    async def _generation_row(index: int, example, replies: list[str]) -> ExampleRow:
        grades = [await asyncio.to_thread(graders.grade, example.grader, reply, example.answer) for reply in replies]
        details = {"grader": example.grader, **_json_safe(grades[0].details)}
        if settings.samples > 1:
            details |= {"samples": len(grades), "passed": sum(g.correct for g in grades), "outputs": replies}
        return ExampleRow(
            index,
            example.prompt,
            example.answer,
            replies[0],
            stats.mean([g.reward for g in grades]),
            grades[0].correct,
            None,
            details,
        )

    rows = await _each_batch(client, eval_set.examples, work, settings, progress)
    if settings.samples == 1:
        metrics = [stats.proportion("accuracy", [r.correct for r in rows])]
        if any(e.grader == "python_tests" for e in eval_set.examples):  # partial credit: tests passed / total
            metrics.append(stats.mean_metric("mean_score", [r.score for r in rows]))
    else:
        metrics = [_pass_at(rows, 1), _pass_at(rows, settings.samples)]
    return metrics, rows


def _pass_at(rows: list[ExampleRow], k: int) -> stats.Metric:
    values = [stats.pass_at_k(r.details["samples"], r.details["passed"], k) for r in rows]
    metric = stats.mean_metric(f"pass@{k}", values)
    return metric


def _json_safe(details: dict) -> dict:
    return {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool, type(None), list, dict))}


# ------------------------------------------------------------------------------------------------ classification


def classification_prompt(prompt: str, labels: list[str]) -> str:
    """The prompt, with the label choices appended unless it already names every label."""
    if all(re.search(rf"\b{re.escape(label)}\b", prompt, re.IGNORECASE) for label in labels):
        return prompt
    return f"{prompt}\n\nAnswer with one of: {', '.join(labels)}."


def parse_label(reply: str, labels: list[str]) -> str | None:
    """The one label the reply names (whole word, case ignored); None when it names none or several."""
    found = {label for label in labels if re.search(rf"\b{re.escape(label)}\b", reply, re.IGNORECASE)}
    return found.pop() if len(found) == 1 else None


async def _classification(client, renderer, eval_set, settings, progress):
    params = settings.sampling_params(eval_set, renderer.get_stop_sequences())
    labels = eval_set.labels

    async def work(first: int, batch: list) -> list[ExampleRow]:
        prompts = [classification_prompt(example.prompt, labels) for example in batch]
        replies_each = await _replies(client, renderer, prompts, params, 1)
        rows = []
        for offset, (example, replies) in enumerate(zip(batch, replies_each)):
            parsed = parse_label(replies[0], labels)
            rows.append(
                ExampleRow(
                    first + offset,
                    example.prompt,
                    example.label,
                    replies[0],
                    float(parsed == example.label),
                    parsed == example.label,
                    parsed,
                    {"unparseable": parsed is None},
                )
            )
        return rows

    rows = await _each_batch(client, eval_set.examples, work, settings, progress)
    metrics = stats.classification_metrics(labels, [r.reference for r in rows], [r.parsed for r in rows])
    return metrics, rows


# ------------------------------------------------------------------------------------------------ log-likelihood


async def _weighted_logprob(client, tokens: list[int], weights: list[float]) -> tuple[float, float]:
    """(sum of log-probs over the weighted tokens, number of weighted tokens)."""
    logprobs = await client.compute_logprobs_async(types.ModelInput.from_ints(tokens))
    total = sum(lp * w for lp, w in zip(logprobs[1:], weights[1:]) if w)
    return float(total), float(sum(weights[1:]))


def _text_of(messages) -> str:
    return "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))


async def _preference(client, renderer, eval_set, settings, progress, reference_client):
    from cookbook_engine.dpo.data import TIE_TOLERANCE, side_tokens

    async def work(index, pair):
        sides = [side_tokens(renderer, pair.prompt, side) for side in (pair.chosen, pair.rejected)]
        (chosen, _), (rejected, _) = [await _weighted_logprob(client, t, w) for t, w in sides]
        details = {"logprob_chosen": chosen, "logprob_rejected": rejected, "rejected": _text_of(pair.rejected)}
        if reference_client is not None:
            (ref_c, _), (ref_r, _) = [await _weighted_logprob(reference_client, t, w) for t, w in sides]
            details["reward_difference"] = (chosen - ref_c) - (rejected - ref_r)
        difference = chosen - rejected
        pick = "tie" if abs(difference) <= TIE_TOLERANCE else "chosen" if difference > 0 else "rejected"
        return ExampleRow(
            index,
            _text_of(pair.prompt),
            _text_of(pair.chosen),
            f"prefers {pick} (log-likelihood {chosen:.2f} vs {rejected:.2f})",
            difference,
            pick == "chosen",
            pick,
            details,
        )

    rows = await _each(eval_set.examples, work, settings, progress)
    metrics = preference_metrics("", [r.score for r in rows], TIE_TOLERANCE)
    if reference_client is not None:
        metrics += preference_metrics("reward_", [r.details["reward_difference"] for r in rows], TIE_TOLERANCE)
    return metrics, rows


def preference_metrics(prefix: str, differences: list[float], tolerance: float) -> list[stats.Metric]:
    """accuracy (strictly more than `tolerance` in favour of chosen), ties (within it) and the mean margin."""
    return [
        stats.proportion(f"{prefix}accuracy", [d > tolerance for d in differences]),
        stats.proportion(f"{prefix}ties", [abs(d) <= tolerance for d in differences]),
        stats.mean_metric(f"{prefix}margin", differences),
    ]


async def _nll(client, renderer, eval_set, settings, progress):
    async def work(index, example: ChatExample):
        messages = list(example.messages)
        tokens, weights = renderer.build_supervised_example(messages, TrainOnWhat.LAST_ASSISTANT_MESSAGE)
        logprob, count = await _weighted_logprob(client, tokens, weights)
        nll = -logprob / count if count else math.nan
        return ExampleRow(
            index,
            _text_of(messages[:-1]),
            _text_of(messages[-1:]),
            f"{nll:.3f} nats/token",
            nll,
            None,
            None,
            {"tokens": count, "sum_nll": -logprob},
        )

    rows = await _each(eval_set.examples, work, settings, progress)
    pairs = [(r.details["sum_nll"], r.details["tokens"]) for r in rows]

    def token_mean(sample) -> float:
        tokens = sum(t for _, t in sample)
        return sum(s for s, _ in sample) / tokens if tokens else math.nan

    low, high = stats.bootstrap_interval(pairs, token_mean)
    nll = token_mean(pairs)
    return [
        stats.Metric("nll", nll, len(rows), low, high),
        stats.Metric("ppl", math.exp(nll), len(rows), math.exp(low), math.exp(high)),
    ], rows


# ------------------------------------------------------------------------------------------------ episodes


def episode_text(turns: list[dict]) -> str:
    """An episode's turns as one text: each reply, and after a tool call what came back."""
    lines = []
    for turn in turns:
        lines.append(turn["reply"])
        if "tool" in turn:
            lines.append(f"[{turn['tool']}: {turn['result']}]")
    return "\n".join(lines)


async def _episodes(client, renderer, eval_set, settings, progress):
    async def work(index: int, example: EpisodeExample) -> ExampleRow:
        env = multi_turn.env_for(example.env, renderer, example.problem, list(example.tools), example.max_turns)

        async def sample_one(observation, stop, _turn: int, _index: int):
            return (await client.sample_async(observation, 1, settings.sampling_params(eval_set, stop))).sequences[0]

        (episode,) = await multi_turn.play([env], sample_one)
        result = episode.turns[-1].result
        turns = result.logs.get("turns", [])
        details = {k: v for k, v in result.metrics.items() if k != "correct"}
        if "ended" in result.logs:
            details["ended"] = result.logs["ended"]
        details["turn_replies"] = turns
        correct = bool(result.metrics.get("correct"))
        return ExampleRow(
            index, example.prompt, example.answer, episode_text(turns), result.reward, correct, None, details
        )

    unknown = sorted({e.env for e in eval_set.examples} - set(multi_turn.MULTI_TURN_ENVS))
    if unknown:
        raise ValueError(
            f"{eval_set.name}: no multi-turn env named {unknown[0]!r}; "
            f"the ones there are: {', '.join(multi_turn.MULTI_TURN_ENVS)}"
        )
    rows = await _each(eval_set.examples, work, settings, progress)
    return [
        stats.proportion("accuracy", [bool(r.correct) for r in rows]),
        stats.mean_metric("tool_calls", [r.details["tool_calls"] for r in rows]),
        stats.mean_metric("turns", [r.details["turns"] for r in rows]),
    ], rows
