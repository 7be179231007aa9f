"""The RL loop (GRPO style), mirroring tinker-cookbook's rl/train.py on one synchronous, on-policy schedule.

Each step: take the step's groups from the dataset; for each group sample `group_size` completions of its prompt in
one call with the current sampling client (the prompt is prefilled once); grade them in the envs; advantages are
reward - group mean; groups with constant reward are dropped (and counted); the rest become datums (sampler
log-probs, advantages, mask); the batch is cut into `num_substeps` parts, each a forward_backward with
`importance_sampling` or `ppo` followed by an optimizer step, all submitted back to back; then a **new** sampling
client is taken from the updated weights for the next step's rollouts. Every rollout is stored as a transcript row.
Held-out accuracy (test/env/all/correct) is measured every `eval_every` steps and at the end with one sample per
held-out problem (greedy by default, `eval_temperature`).

`prepare()` does every input check (env, data, prompt lengths, settings this loop does not support) before a run
exists. Not here: the envs (envs.py), advantages (advantages.py), datums (data.py), metric names (metrics.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from tinker import types

from cookbook_engine import datasets, renderers
from cookbook_engine.config import ConfigError, RLConfig
from cookbook_engine.rl import envs
from cookbook_engine.rl.advantages import centered_advantages, is_constant
from cookbook_engine.rl.data import datum_from_rollout, for_training, sample_train_metrics
from cookbook_engine.rl.metrics import rollout_metrics
from cookbook_engine.rl.types import EnvGroupBuilder, Rollout, RolloutGroup
from cookbook_engine.train_common import (adam_params, learning_rate_for, lr_multiplier, save_checkpoint,
                                          start_training_client, tokenizer_for)

# With learning_rate=auto, RL uses this share of the model's suggested (SL) rate: on the arithmetic env the default
# model learns steadily at 5e-4 and collapses (every answer the same wrong pattern) at 2e-3.
RL_LR_SCALE = 0.5


@dataclass
class PreparedRL:
    env: envs.EnvSetup
    renderer: str
    tokenizer: object
    longest_prompt: int

    def summary(self) -> str:
        return f"{self.env.description}, renderer {self.renderer}, longest prompt {self.longest_prompt} tokens"


def prepare(config: RLConfig) -> PreparedRL:
    if config.max_steps_off_policy or config.stream_minibatch:
        raise ConfigError("max_steps_off_policy and stream_minibatch: this RL loop is synchronous and on-policy; "
                          "leave them at 0 / false")
    tokenizer = tokenizer_for(config)
    renderer = renderers.get_renderer(config.renderer, tokenizer)
    setup = envs.build_env(config, renderer)
    longest, longest_index = 0, 0
    for index, prompt in enumerate(setup.prompts):
        length = renderer.build_generation_prompt([{"role": "user", "content": prompt}]).length
        if length > longest:
            longest, longest_index = length, index
    if longest + config.max_tokens > config.max_length:
        raise datasets.DatasetError(
            f"{config.dataset or config.env}: prompt {longest_index + 1} has {longest} tokens; with "
            f"max_tokens={config.max_tokens} it exceeds max_length={config.max_length} (raise max_length or "
            "shorten the prompt)")
    return PreparedRL(setup, renderer.name, tokenizer, longest)


def sampling_params(config: RLConfig, stop, seed: int | None, *, evaluation: bool = False) -> types.SamplingParams:
    temperature = config.eval_temperature if evaluation else config.temperature
    return types.SamplingParams(max_tokens=config.max_tokens, temperature=temperature,
                                top_p=config.top_p if temperature > 0 else 1.0, stop=stop, seed=seed)


async def group_rollout(builder: EnvGroupBuilder, sampling_client, config: RLConfig, seed: int | None,
                        evaluation: bool = False) -> RolloutGroup:
    """Sample the group's completions in one call (the envs share the prompt) and grade each in its env."""
    envs_G = await builder.make_envs()
    prompt, stop = await envs_G[0].initial_observation()
    params = sampling_params(config, stop, seed, evaluation=evaluation)
    response = await sampling_client.sample_async(prompt, len(envs_G), params)
    sequences_G = response.sequences
    results_G = await asyncio.gather(*[env.step(list(seq.tokens)) for env, seq in zip(envs_G, sequences_G)])
    prompt_tokens = prompt.to_ints()
    rollouts_G = [
        Rollout(prompt_tokens, list(seq.tokens), list(seq.logprobs or []), str(seq.stop_reason), float(result.reward),
                dict(result.metrics), dict(result.logs))
        for seq, result in zip(sequences_G, results_G)
    ]
    return RolloutGroup(rollouts_G, builder.logging_tags())


async def evaluate(sampling_client, builders: list[EnvGroupBuilder], config: RLConfig) -> dict[str, float]:
    """test/env/all/correct etc.: one sample per held-out problem."""
    if not builders:
        return {}
    started = time.perf_counter()
    groups = await asyncio.gather(*[group_rollout(builder, sampling_client, config, seed=config.seed * 7919 + index,
                                                  evaluation=True)
                                    for index, builder in enumerate(builders)])
    metrics = {f"test/{key}": value for key, value in rollout_metrics(list(groups)).items()
               if key.startswith("env/all/") or key.endswith("/correct")}
    metrics = {key: value for key, value in metrics.items() if "by_group" not in key}
    metrics["time/eval"] = time.perf_counter() - started
    return metrics


def transcript_rows(step: int, groups_P: list[RolloutGroup], advantages_P: list[list[float]],
                    dropped_P: list[bool], tokenizer) -> list[dict]:
    rows = []
    for group_idx, (group, advantages_G, dropped) in enumerate(zip(groups_P, advantages_P, dropped_P)):
        prompt = tokenizer.decode(group.rollouts_G[0].prompt_tokens, skip_special_tokens=False)
        for sample_idx, (rollout, advantage) in enumerate(zip(group.rollouts_G, advantages_G)):
            rows.append({
                "step": step, "group_idx": group_idx, "sample_idx": sample_idx, "prompt": prompt,
                "completion": tokenizer.decode(rollout.tokens, skip_special_tokens=False),
                "reward": rollout.reward, "advantage": advantage, "stop_reason": rollout.stop_reason,
                "metrics": {**rollout.metrics, **rollout.logs, "group_dropped": dropped,
                            "tags": group.tags},
            })
    return rows


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


async def train_on(client, data_D: list[types.Datum], config: RLConfig, lr: float) -> dict[str, float]:
    """forward_backward + optim_step per substep, all submitted before any is awaited; KL and entropy metrics."""
    submitted = []
    for chunk in split_substeps(data_D, config.num_substeps):
        fb_future = await client.forward_backward_async([for_training(d) for d in chunk], config.loss_fn,
                                                        loss_fn_config(config))
        optim_future = await client.optim_step_async(adam_params(config, lr))
        submitted.append((chunk, fb_future, optim_future))
    metrics: dict[str, float] = {}
    kl_sum = entropy_sum = weight = loss_sum = grad_norm_sum = 0.0
    for chunk, fb_future, optim_future in submitted:
        output = await fb_future
        optim = await optim_future
        chunk_metrics = sample_train_metrics(chunk, output)
        tokens = sum(sum(d.loss_fn_inputs["mask"].to_numpy()) for d in chunk)
        if chunk_metrics:
            kl_sum += chunk_metrics["optim/kl_sample_train"] * tokens
            entropy_sum += chunk_metrics["optim/entropy"] * tokens
            weight += tokens
        loss_sum += float((output.metrics or {}).get("loss:sum", 0.0))
        grad_norm_sum += float((optim.metrics or {}).get("grad_norm", 0.0))
    if weight:
        metrics["optim/kl_sample_train"] = kl_sum / weight
        metrics["optim/entropy"] = entropy_sum / weight
    metrics["optim/loss_sum"] = loss_sum
    metrics["optim/grad_norm"] = grad_norm_sum / len(submitted)
    metrics["optim/num_substeps"] = float(len(submitted))
    return metrics


def rl_learning_rate(config: RLConfig) -> float:
    return config.learning_rate if config.learning_rate is not None else learning_rate_for(config) * RL_LR_SCALE


def plan_steps(config: RLConfig, batches_per_epoch: int) -> int:
    return config.max_steps or batches_per_epoch * config.num_epochs


async def train(config: RLConfig, ctx, prepared: PreparedRL | None = None) -> None:
    prepared = prepared or prepare(config)
    setup, tokenizer = prepared.env, prepared.tokenizer
    _, client, start_step = start_training_client(config, ctx.resume, ctx)
    base_lr = rl_learning_rate(config)
    total_steps = plan_steps(config, len(setup.train))
    ctx.note(f"RL on {config.model}: {prepared.summary()}; {total_steps} steps of {config.groups_per_batch} groups "
             f"x {config.group_size} samples, loss {config.loss_fn}, lr {base_lr:g}"
             + (f"; resuming at step {start_step}" if start_step else ""))
    ctx.progress(start_step, total_steps)
    sampling_client = await client.save_weights_and_get_sampling_client_async()
    step = start_step
    for step in range(start_step, total_steps):
        if ctx.cancelled():
            break
        step_started = time.perf_counter()
        metrics: dict[str, float] = {}
        if config.eval_every and step % config.eval_every == 0:
            metrics.update(await evaluate(sampling_client, setup.test, config))

        sample_started = time.perf_counter()
        builders = setup.train.get_batch(step)
        groups_P = list(await asyncio.gather(*[
            group_rollout(builder, sampling_client, config, seed=(config.seed * 1_000_003 + step) * 1000 + index)
            for index, builder in enumerate(builders)]))
        metrics["time/sample"] = time.perf_counter() - sample_started

        advantages_P = [centered_advantages(group.rewards_G) for group in groups_P]
        dropped_P = [is_constant(group.rewards_G) for group in groups_P]
        ctx.logger.log_transcripts(transcript_rows(step, groups_P, advantages_P, dropped_P, tokenizer))
        data_D = [datum_from_rollout(rollout, advantage)
                  for group, advantages_G, dropped in zip(groups_P, advantages_P, dropped_P) if not dropped
                  for rollout, advantage in zip(group.rollouts_G, advantages_G)]

        lr = base_lr * lr_multiplier(config.lr_schedule, step, total_steps)
        train_started = time.perf_counter()
        if data_D:
            metrics.update(await train_on(client, data_D, config, lr))
            sampling_client = await client.save_weights_and_get_sampling_client_async()
        metrics["time/train"] = time.perf_counter() - train_started

        metrics.update(rollout_metrics(groups_P))
        metrics.update({
            "num_groups_dropped": float(sum(dropped_P)), "frac_groups_dropped": sum(dropped_P) / len(groups_P),
            "optim/lr": lr, "optim/num_datums": float(len(data_D)),
            "optim/num_tokens": float(sum(d.model_input.length for d in data_D)),
            "progress": (step + 1) / total_steps, "time/total": time.perf_counter() - step_started,
        })
        ctx.logger.log_metrics(step, metrics)
        ctx.progress(step + 1, total_steps)
        done = step + 1
        if config.save_every and done % config.save_every == 0 and done < total_steps:
            await save_checkpoint(client, ctx, step=done, name=f"{done:06d}", loop_state={"batch": done})
    else:
        step = total_steps
    completed = step if ctx.cancelled() else total_steps
    if not ctx.cancelled() and setup.test:
        ctx.logger.log_metrics(total_steps, await evaluate(sampling_client, setup.test, config))
    await save_checkpoint(client, ctx, step=completed, name="final" if completed == total_steps else f"{completed:06d}",
                          loop_state={"batch": completed}, final=True)
    ctx.note(f"saved step {completed} of {total_steps}")
