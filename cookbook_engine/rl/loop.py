"""The RL loop (GRPO style), mirroring tinker-cookbook's rl/train.py, in its three schedules.

Each step: take the step's groups from the dataset; for each group sample `group_size` completions of its prompt in
one call with a sampling client (the prompt is prefilled once); grade them in the envs; advantages are
reward - group mean; groups with constant reward are dropped (and counted); the rest become datums (sampler
log-probs, advantages, mask) trained with `importance_sampling` or `ppo` (which take the sampler's log-probs, so
data sampled by an older policy is weighted correctly); then a **new** sampling client is taken from the updated
weights. Every trained rollout is stored as a transcript row, with the policy version (step) that sampled it.
Held-out accuracy (test/env/all/correct) is measured every `eval_every` steps and at the end with one sample per
held-out problem (greedy by default, `eval_temperature`). A mix of envs (envs.py) logs each env's metrics as
env/<name>/... and test/env/<name>/..., and each transcript row names its env (`task`).

The schedules (tinker-cookbook's sync training, StreamMinibatchConfig and AsyncConfig):
- synchronous (default): all groups of the step are sampled, then the batch is cut into `num_substeps` parts, each
  a forward_backward followed by an optim_step, all submitted back to back, with the request for the new sampling
  client queued right behind them; only then are the answers awaited.
- streaming minibatches (`stream_minibatch=true`, still on-policy): the step's groups are sampled concurrently and
  arrive one by one; as soon as a minibatch's worth of groups is in, its forward_backward is submitted, so training
  overlaps the rest of the sampling. Each of the `num_substeps` substeps has `num_minibatches` minibatches and one
  optim_step, as in the cookbook.
- off-policy (`max_steps_off_policy=K > 0`): `groups_per_batch` workers keep sampling in the background, always
  with the newest sampling client, while the trainer consumes finished groups in arrival order. A group sampled by
  the policy of step v and reaching the trainer at step t is trained when t - v <= K; otherwise it is dropped,
  counted (async/stale_groups_dropped) and its problem sampled again with the newest policy. The cookbook's
  newer AsyncConfig waits for stragglers instead of dropping them; this is its earlier, dropping behaviour.

`prepare()` does every input check (env, data, prompt lengths, settings) before a run exists; `plan()` says how many
steps a run takes (max_steps, or else num_epochs passes over the env's batches of problems), which the New run form's
estimate reads. The loop's frame (evaluations, checkpoints, the end) is training/skeleton.py's, shared with SL and DPO.
Not here: the envs (envs.py), advantages (advantages.py), datums (data.py), metric names (metrics.py), the sandbox
(sandbox.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinker import types

from cookbook_engine import renderers, sandbox
from cookbook_engine.config import MULTI_TURN_ENVS, RLConfig
from cookbook_engine.data import loading as datasets
from cookbook_engine.evals.in_training import NamedEvals, PeriodicEvals
from cookbook_engine.rl import envs, kl, multi_turn
from cookbook_engine.rl.advantages import group_advantages, is_constant
from cookbook_engine.rl.data import datum_from_rollout, for_training, sample_train_metrics
from cookbook_engine.rl.metrics import rollout_metrics
from cookbook_engine.rl.types import EnvGroupBuilder, Rollout, RolloutGroup
from cookbook_engine.training import anchor as anchoring, lora_a, reference
from cookbook_engine.training.anchor import Anchor, AnchorPass
from cookbook_engine.training.common import (
    adam_params,
    lr_multiplier,
    start_training_client,
    tokenizer_for,
)
from cookbook_engine.training.learning_rate import learning_rate
from cookbook_engine.training.skeleton import LoopPlan, LoopSkeleton

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import ResultFuture, SamplingClient, TrainingClient
    from cookbook_engine.training.context import RunContext


@dataclass
class PreparedRL:
    env: envs.EnvSetup
    renderer: str
    tokenizer: object
    longest_prompt: int

    def summary(self) -> str:
        return f"{self.env.description}, renderer {self.renderer}, longest prompt {self.longest_prompt} tokens"


def prepare(config: RLConfig) -> PreparedRL:
    tokenizer = tokenizer_for(config)
    renderer = renderers.get_renderer(config.renderer, tokenizer)
    setup = envs.build_env(config, renderer)
    longest, longest_index = 0, 0
    for index, prompt in enumerate(setup.prompts):
        length = renderer.build_generation_prompt([{"role": "user", "content": prompt}]).length
        if length > longest:
            longest, longest_index = length, index
    turns = config.max_turns if any(n in MULTI_TURN_ENVS for n in envs.env_names(config.env)) else 1
    episode = config.max_tokens * turns + OBSERVATION_TOKENS * (turns - 1)  # a multi-turn episode's later tokens
    if longest + episode > config.max_length:
        raise datasets.DatasetError(
            f"{config.dataset or config.env}: prompt {longest_index + 1} has {longest} tokens; with "
            f"max_tokens={config.max_tokens}"
            + (f" over max_turns={turns} turns" if turns > 1 else "")
            + f" it exceeds max_length={config.max_length} (raise max_length or shorten the prompt)"
        )
    return PreparedRL(setup, renderer.name, tokenizer, longest)


OBSERVATION_TOKENS = 32  # room for each tool result fed back between turns (a `calc: 1786` message is about 12)


def sampling_params(config: RLConfig, stop, seed: int | None, *, evaluation: bool = False) -> types.SamplingParams:
    temperature = config.eval_temperature if evaluation else config.temperature
    return types.SamplingParams(
        max_tokens=config.max_tokens,
        temperature=temperature,
        top_p=config.top_p if temperature > 0 else 1.0,
        stop=stop,
        seed=seed,
    )


async def group_rollout(
    builder: EnvGroupBuilder,
    sampling_client: SamplingClient,
    config: RLConfig,
    seed: int | None,
    evaluation: bool = False,
) -> RolloutGroup:
    """Sample the group's completions in one call (the envs share the prompt) and grade each in its env; episodes of
    a multi-turn env go on turn by turn, each env alone (multi_turn.later_turns)."""
    envs_G = await builder.make_envs()
    for env in envs_G[1:]:  # each env keeps its own conversation; the first turn's prompt is the same for all
        await env.initial_observation()
    prompt, stop = await envs_G[0].initial_observation()
    params = sampling_params(config, stop, seed, evaluation=evaluation)
    response = await sampling_client.sample_async(prompt, len(envs_G), params)
    sequences_G = response.sequences
    results_G = await asyncio.gather(*[env.step(list(seq.tokens)) for env, seq in zip(envs_G, sequences_G)])
    prompt_tokens = prompt.to_ints()
    if not all(result.episode_done for result in results_G):
        episodes = [
            multi_turn.Episode(env, [multi_turn.Turn.of(prompt_tokens, s, result)])
            for env, s, result in zip(envs_G, sequences_G, results_G)
        ]

        async def sample_one(observation: types.ModelInput, stop: Any, turn: int, index: int) -> types.SampledSequence:
            turn_seed = None if seed is None else seed + 7919 * turn + 104_729 * index
            turn_params = sampling_params(config, stop, turn_seed, evaluation=evaluation)
            return (await sampling_client.sample_async(observation, 1, turn_params)).sequences[0]

        await multi_turn.later_turns(episodes, sample_one)
        rollouts = [multi_turn.assemble(prompt_tokens, episode.turns) for episode in episodes]
        return RolloutGroup(rollouts, builder.logging_tags(), builder.task)
    rollouts_G = [
        Rollout(
            prompt_tokens,
            list(seq.tokens),
            list(seq.logprobs or []),
            str(seq.stop_reason),
            float(result.reward),
            dict(result.metrics),
            dict(result.logs),
        )
        for seq, result in zip(sequences_G, results_G)
    ]
    return RolloutGroup(rollouts_G, builder.logging_tags(), builder.task)


async def evaluate(
    sampling_client: SamplingClient, builders: list[EnvGroupBuilder], config: RLConfig
) -> dict[str, float]:
    """test/env/all/correct etc.: one sample per held-out problem."""
    if not builders:
        return {}
    started = time.perf_counter()
    groups = await asyncio.gather(
        *[
            group_rollout(builder, sampling_client, config, seed=config.seed * 7919 + index, evaluation=True)
            for index, builder in enumerate(builders)
        ]
    )
    task_totals = {f"env/{group.task}/reward/total" for group in groups if group.task}
    metrics = {
        f"test/{key}": value
        for key, value in rollout_metrics(list(groups)).items()
        if key.startswith("env/all/") or key.endswith("/correct") or key in task_totals
    }
    metrics = {key: value for key, value in metrics.items() if "by_group" not in key}
    metrics["time/eval"] = time.perf_counter() - started
    return metrics


def transcript_rows(
    step: int,
    groups_P: list[RolloutGroup],
    advantages_P: list[list[float]],
    dropped_P: list[bool],
    tokenizer,
    extra_P: list[dict] | None = None,
) -> list[dict]:
    """One row per rollout; `extra_P` adds per-group fields to each row's metrics (e.g. the sampling step)."""
    rows = []
    extra_P = extra_P or [{} for _ in groups_P]
    for group_idx, (group, advantages_G, dropped, extra) in enumerate(zip(groups_P, advantages_P, dropped_P, extra_P)):
        prompt = tokenizer.decode(group.rollouts_G[0].prompt_tokens, skip_special_tokens=False)
        for sample_idx, (rollout, advantage) in enumerate(zip(group.rollouts_G, advantages_G)):
            rows.append(
                {
                    "step": step,
                    "group_idx": group_idx,
                    "sample_idx": sample_idx,
                    "prompt": prompt,
                    "completion": tokenizer.decode(_without_stop_token(rollout, tokenizer), skip_special_tokens=False),
                    "reward": rollout.reward,
                    "advantage": advantage,
                    "stop_reason": rollout.stop_reason,
                    "metrics": {
                        **rollout.metrics,
                        **rollout.logs,
                        "group_dropped": dropped,
                        "tags": group.tags,
                        **({"task": group.task} if group.task else {}),
                        **extra,
                    },
                }
            )
    return rows


def _without_stop_token(rollout, tokenizer) -> list[int]:
    """The completion's tokens without the special token it stopped on (e.g. `<|im_end|>`): stop_reason says it."""
    tokens = list(rollout.tokens)
    if rollout.stop_reason == "stop" and tokens and tokens[-1] in set(tokenizer.all_special_ids):
        tokens.pop()
    return tokens


def split_substeps(data_D: list, num_substeps: int) -> list[list]:
    """The batch cut into num_substeps nearly equal, non-empty parts (fewer when there are fewer datums)."""
    parts = min(num_substeps, len(data_D))
    size, extra = divmod(len(data_D), parts)
    chunks, start = [], 0
    for part in range(parts):
        end = start + size + (part < extra)
        chunks.append(data_D[start:end])
        start = end
    return chunks


def loss_fn_config(config: RLConfig) -> dict | None:
    if config.loss_fn == "ppo":
        return {"clip_low_threshold": config.clip_low_threshold, "clip_high_threshold": config.clip_high_threshold}
    return None


@dataclass
class SampledGroup:
    """A sampled group with where it came from and which policy sampled it."""

    group: RolloutGroup
    sampled_at: int  # the policy version: training steps taken before its sampling client was made
    batch: int  # the dataset batch its problem came from
    index: int  # its place in that batch
    builder: EnvGroupBuilder
    attempt: int = 0  # off-policy: how many earlier samplings of this problem were dropped as stale


@dataclass
class Substep:
    """One optimizer substep in flight: its forward_backward calls (each with its datums) and its optim_step."""

    passes: list[tuple[list[types.Datum], ResultFuture[types.ForwardBackwardOutput]]]
    optim: ResultFuture[types.OptimStepResponse]
    anchor_pass: AnchorPass | None = None


async def close_substep(
    client: TrainingClient,
    passes: list[tuple[list[types.Datum], ResultFuture[types.ForwardBackwardOutput]]],
    config: RLConfig,
    lr: float,
    anchor: Anchor | None,
) -> Substep:
    """The substep's anchor forward_backward (when the run has one) and its optim_step, queued after its passes."""
    anchor_pass = await anchoring.submit(client, anchor)
    return Substep(passes, await client.optim_step_async(adam_params(config, lr)), anchor_pass)


# Adds per-token terms to the datums' advantages before they train (the KL penalty, a teacher's KL) and returns its
# metrics; None trains on the group-centred rewards alone.
AdvantageShaping = Callable[[list[types.Datum]], Awaitable[dict[str, float]]]


def kl_penalty_shaping(config: RLConfig, service: Any, store: Any = None) -> AdvantageShaping | None:
    """kl_penalty_coef > 0: advantages penalised by the KL to the reference (the base model or kl_reference)."""
    if config.kl_penalty_coef <= 0:
        return None
    reference_client = reference.sampling_client_for(service, config.model, config.kl_reference, store)

    async def shaping(data_D: list[types.Datum]) -> dict[str, float]:
        return await kl.add_kl_penalty(data_D, reference_client, config.kl_penalty_coef)

    return shaping


def rollout_seed(config: RLConfig, batch: int, index: int, attempt: int = 0) -> int:
    return (config.seed * 1_000_003 + batch) * 1000 + index + attempt * 1_000_000_007


async def sample_group(
    builder: EnvGroupBuilder,
    sampling_client: SamplingClient,
    version: int,
    config: RLConfig,
    batch: int,
    index: int,
    attempt: int = 0,
) -> SampledGroup:
    group = await group_rollout(builder, sampling_client, config, seed=rollout_seed(config, batch, index, attempt))
    return SampledGroup(group, version, batch, index, builder, attempt)


def datums_of(groups: list[SampledGroup], config: RLConfig) -> list[types.Datum]:
    """The training datums of the groups whose rewards are not all equal."""
    return [
        datum_from_rollout(rollout, advantage)
        for sampled in groups
        if not is_constant(sampled.group.rewards_G)
        for rollout, advantage in zip(
            sampled.group.rollouts_G, group_advantages(sampled.group.rewards_G, config.scale_rewards)
        )
    ]


async def submit_forward_backward(
    client: TrainingClient, data_D: list[types.Datum], config: RLConfig
) -> ResultFuture[types.ForwardBackwardOutput]:
    return await client.forward_backward_async(
        [for_training(d) for d in data_D], config.loss_fn, loss_fn_config(config)
    )


async def submit_substeps(
    client: TrainingClient, data_D: list[types.Datum], config: RLConfig, lr: float, anchor: Anchor | None = None
) -> list[Substep]:
    """forward_backward + optim_step per substep, all submitted back to back, nothing awaited."""
    substeps = []
    for chunk in split_substeps(data_D, config.num_substeps):
        fb_future = await submit_forward_backward(client, chunk, config)
        substeps.append(await close_substep(client, [(chunk, fb_future)], config, lr, anchor))
    return substeps


def queue_sampling_client(client: TrainingClient) -> asyncio.Task[SamplingClient]:
    """Ask for a sampling client on the weights after the submitted steps, before awaiting them: the request
    queues right behind the last optim_step (at Tinker, and on the clocked simulator, in the same clock cycle)."""
    return asyncio.ensure_future(client.save_weights_and_get_sampling_client_async())


async def collect(substeps: list[Substep]) -> dict[str, float]:
    """Await the submitted substeps; loss, gradient norm, KL between sampler and trainer, entropy."""
    metrics: dict[str, float] = {}
    kl_sum = entropy_sum = weight = loss_sum = grad_norm_sum = 0.0
    anchor_kl: list[float] = []
    for substep in substeps:
        for chunk, fb_future in substep.passes:
            output = await fb_future
            chunk_metrics = sample_train_metrics(chunk, output)
            tokens = sum(sum(d.loss_fn_inputs["mask"].to_numpy()) for d in chunk)
            if chunk_metrics:
                kl_sum += chunk_metrics["optim/kl_sample_train"] * tokens
                entropy_sum += chunk_metrics["optim/entropy"] * tokens
                weight += tokens
            loss_sum += float((output.metrics or {}).get("loss:sum", 0.0))
        optim = await substep.optim
        grad_norm_sum += float((optim.metrics or {}).get("grad_norm", 0.0))
        if substep.anchor_pass is not None:
            anchor_kl.append((await substep.anchor_pass.metrics())["anchor/kl"])
    if weight:
        metrics["optim/kl_sample_train"] = kl_sum / weight
        metrics["optim/entropy"] = entropy_sum / weight
    metrics["optim/loss_sum"] = loss_sum
    metrics["optim/grad_norm"] = grad_norm_sum / len(substeps)
    metrics["optim/num_substeps"] = float(len(substeps))
    metrics["optim/num_forward_backward"] = float(sum(len(substep.passes) for substep in substeps))
    if anchor_kl:
        metrics["anchor/kl"] = sum(anchor_kl) / len(anchor_kl)
    return metrics


async def train_on(
    client: TrainingClient,
    data_D: list[types.Datum],
    config: RLConfig,
    lr: float,
    shaping: AdvantageShaping | None = None,
    anchor: Anchor | None = None,
) -> tuple[dict[str, float], SamplingClient]:
    """Train on the datums (substeps submitted back to back) and return (metrics, the new sampling client)."""
    shaped = await shaping(data_D) if shaping is not None else {}
    substeps = await submit_substeps(client, data_D, config, lr, anchor)
    sampling_client = queue_sampling_client(client)
    metrics = await collect(substeps)
    return {**shaped, **metrics}, await sampling_client


async def synchronous_step(
    step: int,
    builders: list[EnvGroupBuilder],
    sampling_client: SamplingClient,
    client: TrainingClient,
    config: RLConfig,
    lr: float,
    shaping: AdvantageShaping | None = None,
    anchor: Anchor | None = None,
) -> tuple[list[SampledGroup], dict[str, float], SamplingClient]:
    """Sample every group of the step, then train on them: (groups, metrics, the next sampling client)."""
    started = time.perf_counter()
    groups = list(
        await asyncio.gather(
            *[
                sample_group(builder, sampling_client, step, config, step, index)
                for index, builder in enumerate(builders)
            ]
        )
    )
    metrics = {"time/sample": time.perf_counter() - started}
    started = time.perf_counter()
    data_D = datums_of(groups, config)
    if data_D:
        trained, sampling_client = await train_on(client, data_D, config, lr, shaping, anchor)
        metrics.update(trained)
    metrics["time/train"] = time.perf_counter() - started
    return groups, metrics, sampling_client


async def streaming_step(
    step: int,
    builders: list[EnvGroupBuilder],
    sampling_client: SamplingClient,
    client: TrainingClient,
    config: RLConfig,
    lr: float,
    shaping: AdvantageShaping | None = None,
    anchor: Anchor | None = None,
) -> tuple[list[SampledGroup], dict[str, float], SamplingClient]:
    """Sample the step's groups concurrently and submit each minibatch's forward_backward as soon as its groups
    are in; one optim_step closes each substep. Still on-policy: every group is sampled by the step's client."""
    started = time.perf_counter()
    arrived: asyncio.Queue = asyncio.Queue()

    async def sample_into_queue(index: int, builder: EnvGroupBuilder) -> None:
        try:
            arrived.put_nowait(await sample_group(builder, sampling_client, step, config, step, index))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the trainer raises it instead of waiting for a group that never comes
            arrived.put_nowait(exc)

    tasks = [asyncio.create_task(sample_into_queue(index, builder)) for index, builder in enumerate(builders)]
    parts = config.num_substeps * config.pipelining.num_minibatches
    per_minibatch = [len(part) for part in split_substeps(builders, parts)]
    groups: list[SampledGroup] = []
    substeps: list[Substep] = []
    passes: list[tuple[list[types.Datum], ResultFuture[types.ForwardBackwardOutput]]] = []
    shaped: list[tuple[int, dict[str, float]]] = []  # each minibatch's shaping metrics, with its datum count
    try:
        for number, size in enumerate(per_minibatch):
            minibatch = []
            for _ in range(size):
                item = await arrived.get()
                if isinstance(item, BaseException):
                    raise item
                minibatch.append(item)
            groups += minibatch
            data_D = datums_of(minibatch, config)
            if data_D and shaping is not None:
                shaped.append((len(data_D), await shaping(data_D)))
            if data_D:
                passes.append((data_D, await submit_forward_backward(client, data_D, config)))
            if (number + 1) % config.pipelining.num_minibatches == 0 or number == len(per_minibatch) - 1:
                if passes:  # a substep whose groups all had equal rewards has no gradient: no optimizer step
                    substeps.append(await close_substep(client, passes, config, lr, anchor))
                passes = []
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # nothing keeps sampling after the step ends
    metrics = {"time/sample": time.perf_counter() - started, **weighted_mean(shaped)}
    started = time.perf_counter()
    if substeps:
        next_client = queue_sampling_client(client)
        metrics.update(await collect(substeps))
        sampling_client = await next_client
    metrics["time/train"] = time.perf_counter() - started
    groups.sort(key=lambda sampled: sampled.index)
    return groups, metrics, sampling_client


def weighted_mean(parts: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Each metric averaged over the parts, weighted by the part's size."""
    total = sum(size for size, _ in parts)
    names = {name for _, metrics in parts for name in metrics}
    return {name: sum(size * metrics.get(name, 0.0) for size, metrics in parts) / total for name in names}


class BackgroundSampler:
    """The off-policy mode's sampling: `groups_per_batch` workers take the problems of the coming batches in order
    and sample each with the newest sampling client (`client`, of policy version `version`), queueing finished
    groups in `finished`. `resample()` samples a dropped problem again. `stop()` cancels everything."""

    def __init__(
        self,
        setup: envs.EnvSetup,
        config: RLConfig,
        sampling_client: SamplingClient,
        version: int,
        first_batch: int,
        last_batch: int,
    ):
        self.setup, self.config = setup, config
        self.client, self.version = sampling_client, version
        self.finished: asyncio.Queue = asyncio.Queue()
        self._problems: asyncio.Queue = asyncio.Queue(maxsize=config.groups_per_batch)
        self._tasks = [asyncio.create_task(self._feed(first_batch, last_batch))]
        self._tasks += [asyncio.create_task(self._work()) for _ in range(config.groups_per_batch)]

    async def _feed(self, first_batch: int, last_batch: int) -> None:
        try:
            for batch in range(first_batch, last_batch):
                for index, builder in enumerate(self.setup.train.get_batch(batch)):
                    await self._problems.put((builder, batch, index, 0))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a dataset that fails: the trainer raises it instead of waiting for groups
            self.finished.put_nowait(exc)

    async def _work(self) -> None:
        while True:
            await self._sample(*await self._problems.get())

    async def _sample(self, builder: EnvGroupBuilder, batch: int, index: int, attempt: int) -> None:
        try:
            self.finished.put_nowait(
                await sample_group(builder, self.client, self.version, self.config, batch, index, attempt)
            )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the trainer raises it
            self.finished.put_nowait(exc)

    def resample(self, stale: SampledGroup) -> None:
        self._tasks = [task for task in self._tasks if not task.done()]
        self._tasks.append(
            asyncio.create_task(self._sample(stale.builder, stale.batch, stale.index, stale.attempt + 1))
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def off_policy_step(
    step: int,
    wanted: int,
    sampler: BackgroundSampler,
    client: TrainingClient,
    config: RLConfig,
    lr: float,
    shaping: AdvantageShaping | None = None,
    anchor: Anchor | None = None,
) -> tuple[list[SampledGroup], dict[str, float], SamplingClient]:
    """Train on the next `wanted` groups sampled at most `max_steps_off_policy` steps ago, dropping staler ones."""
    started = time.perf_counter()
    groups: list[SampledGroup] = []
    stale = 0
    while len(groups) < wanted:
        item = await sampler.finished.get()
        if isinstance(item, BaseException):
            raise item
        if step - item.sampled_at > config.pipelining.max_steps_off_policy:
            stale += 1
            sampler.resample(item)
        else:
            groups.append(item)
    lags = [step - sampled.sampled_at for sampled in groups]
    metrics = {
        "time/sample": time.perf_counter() - started,
        "async/stale_groups_dropped": float(stale),
        "async/staleness_mean": sum(lags) / len(lags),
        "async/staleness_max": float(max(lags)),
        "async/queued_groups": float(sampler.finished.qsize()),
    }
    started = time.perf_counter()
    data_D = datums_of(groups, config)
    sampling_client = sampler.client
    if data_D:
        trained, sampling_client = await train_on(client, data_D, config, lr, shaping, anchor)
        metrics.update(trained)
    sampler.client, sampler.version = sampling_client, step + 1
    metrics["time/train"] = time.perf_counter() - started
    return groups, metrics, sampling_client


def schedule_summary(config: RLConfig) -> str:
    if config.pipelining.max_steps_off_policy:
        return f"off-policy, groups up to {config.pipelining.max_steps_off_policy} steps old"
    if config.pipelining.stream_minibatch:
        return f"streaming {config.pipelining.num_minibatches} minibatches per substep"
    return "synchronous"


def sandbox_note(config: RLConfig) -> str | None:
    """What the code sandbox isolates here, for the run's log; None when the env runs no model-written code."""
    names = envs.env_names(config.env)
    if "code" not in names and not ("custom" in names and config.grader == "python_tests"):
        return None
    capabilities = sandbox.sandbox_capabilities()
    if capabilities["network_isolated"]:
        return (
            f"sandbox: {capabilities['description']}; network isolated ({capabilities['network_method']}); "
            f"files: {capabilities['filesystem']}"
        )
    return (
        f"sandbox: WARNING: the network is NOT isolated on this machine, model-written code can reach it "
        f"({capabilities['reason']}); {capabilities['description']}; files: {capabilities['filesystem']}"
    )


def log_step(
    ctx: RunContext,
    config: RLConfig,
    step: int,
    total_steps: int,
    groups: list[SampledGroup],
    metrics: dict[str, float],
    lr: float,
    tokenizer: Any,
    started: float,
) -> None:
    groups_P = [sampled.group for sampled in groups]
    advantages_P = [group_advantages(group.rewards_G, config.scale_rewards) for group in groups_P]
    dropped_P = [is_constant(group.rewards_G) for group in groups_P]
    extra_P = [
        {
            "sampled_at_step": sampled.sampled_at,
            "staleness": step - sampled.sampled_at,
            "problem_batch": sampled.batch,
            "problem_index": sampled.index,
        }
        for sampled in groups
    ]
    ctx.logger.log_transcripts(transcript_rows(step, groups_P, advantages_P, dropped_P, tokenizer, extra_P))
    data_D = datums_of(groups, config)
    metrics.update(rollout_metrics(groups_P))
    metrics.update(
        {
            "num_groups_dropped": float(sum(dropped_P)),
            "frac_groups_dropped": sum(dropped_P) / len(groups_P),
            "optim/lr": lr,
            "optim/num_datums": float(len(data_D)),
            "optim/num_tokens": float(sum(d.model_input.length for d in data_D)),
            "progress": (step + 1) / total_steps,
            "time/total": time.perf_counter() - started,
        }
    )
    ctx.logger.log_metrics(step, metrics)
    ctx.progress(step + 1, total_steps)


def plan(config: RLConfig, prepared: PreparedRL) -> LoopPlan:
    """The steps this run takes: max_steps, or else num_epochs passes over the env's batches of problems; and the
    most tokens they sample (every completion at max_tokens)."""
    batches_per_epoch = max(1, len(prepared.env.train))
    total_steps = config.max_steps or batches_per_epoch * config.num_epochs
    return LoopPlan(
        total_steps, batches_per_epoch, total_steps * config.groups_per_batch * config.group_size * config.max_tokens
    )


def held_out_evals(config: RLConfig, prepared: PreparedRL) -> PeriodicEvals:
    """test/env/all/correct etc. on the held-out problems (when there are any) and the named eval sets (evals=...:
    test/<set>/<metric>), at the same points, on a sampling client."""
    test = prepared.env.test
    return PeriodicEvals(
        (lambda client: evaluate(client, test, config)) if test else None, NamedEvals.for_config(config)
    )


async def train_step(
    step: int,
    setup: envs.EnvSetup,
    client: TrainingClient,
    sampler: BackgroundSampler | None,
    sampling_client: SamplingClient,
    config: RLConfig,
    lr: float,
    shaping: AdvantageShaping | None = None,
    anchor: Anchor | None = None,
) -> tuple[list[SampledGroup], dict[str, float], SamplingClient]:
    """One step in the run's schedule (off-policy, streaming or synchronous): (groups, metrics, next sampling
    client)."""
    builders = setup.train.get_batch(step)
    if sampler is not None:
        return await off_policy_step(step, len(builders), sampler, client, config, lr, shaping, anchor)
    if config.pipelining.stream_minibatch:
        return await streaming_step(step, builders, sampling_client, client, config, lr, shaping, anchor)
    return await synchronous_step(step, builders, sampling_client, client, config, lr, shaping, anchor)


async def train(config: RLConfig, ctx: RunContext, prepared: PreparedRL | None = None) -> None:
    prepared = prepared or prepare(config)
    setup, tokenizer = prepared.env, prepared.tokenizer
    service, client, start_step = start_training_client(config, ctx.resume, ctx)
    fixed_note = await lora_a.fix_for_run(config, client, ctx.resume is not None)
    shaping = kl_penalty_shaping(config, service, getattr(ctx, "store", None))
    anchor = await anchoring.build(config, service, start_step * config.num_substeps)
    base_lr = learning_rate(config)
    run_plan = plan(config, prepared)
    total_steps = run_plan.total_steps
    loop = LoopSkeleton(config, ctx, client, run_plan, start_step, held_out_evals(config, prepared))
    note = sandbox_note(config)
    loop.start(
        f"RL on {config.model}: {prepared.summary()}; {total_steps} steps of {config.groups_per_batch} groups "
        f"x {config.group_size} samples, loss {config.loss_fn}, lr {base_lr:g}, {schedule_summary(config)}"
        + (f", KL penalty {config.kl_penalty_coef:g} to {config.kl_reference or 'the base model'}" if shaping else "")
        + anchoring.describe(anchor, config),
        *([fixed_note] if fixed_note else []),
        *([note] if note else []),
    )
    sampling_client = await client.save_weights_and_get_sampling_client_async()
    sampler = (
        BackgroundSampler(setup, config, sampling_client, start_step, start_step, total_steps)
        if config.pipelining.max_steps_off_policy
        else None
    )
    try:
        for step in loop.steps():
            step_started = time.perf_counter()
            metrics = await loop.evaluations_due(step, sampling_client)
            lr = base_lr * lr_multiplier(config.lr_schedule, step, total_steps)
            groups, step_metrics, sampling_client = await train_step(
                step, setup, client, sampler, sampling_client, config, lr, shaping, anchor
            )
            metrics.update(step_metrics)
            log_step(ctx, config, step, total_steps, groups, metrics, lr, tokenizer, step_started)
            if loop.save_due(step + 1):
                await loop.save(step + 1)
    finally:
        if sampler is not None:
            await sampler.stop()
    await loop.finish(sampling_client)
