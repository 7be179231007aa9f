"""The distillation loop: on-policy (below), mirroring tinker-cookbook's distillation/train_on_policy.py, or with
mode=prompt prompt distillation (prompt.py: the teacher answers with a context, the student learns its replies
without it). `prepare` is shared (the prompts); `plan` and `train` go to the mode's own.

Each step: take the step's prompts; the student (the LoRA being trained, started fresh or from a checkpoint) samples
`group_size` replies to each with its current sampling client; the teacher (the base model, a checkpoint, or a
hosted model) scores every sampled token with `compute_logprobs`; each token's advantage is the negative reverse KL
-coef * (student logprob - teacher logprob), and the datums train with `importance_sampling` (the sampler's
log-probs are the student's own, so the ratio starts at 1). No reward and no grader: nothing is dropped, every
reply trains. Then a **new** sampling client is taken from the updated weights, as in RL.

Metrics: teacher_kl (mean reverse KL per completion token, which should fall), distill/teacher_logprob and
distill/student_logprob (per token), ac_tokens_per_turn, the optimizer's (optim/*), and the student's score on the
eval sets named in `evals=` (test/<set>/<metric>) every `eval_every` steps and at the end. Every reply is stored as a
transcript row (reward 0, its per-token KL in the metrics), so Transcripts shows what the student wrote.

The prompts come from a chat dataset (each conversation up to its last reply) or a prompt file (its `prompt`
column). Not here: the KL arithmetic (rl/kl.py), the teacher's client (training/reference.py, distill/sampling.py), RL's
rewards, prompt distillation (prompt.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cookbook_engine import renderers
from cookbook_engine.config import DistillConfig
from cookbook_engine.data import loading as datasets
from cookbook_engine.distill import prompt as prompt_mode
from cookbook_engine.distill.sampling import sample_group, teacher_client
from cookbook_engine.evals.in_training import NamedEvals, PeriodicEvals
from cookbook_engine.rl import kl
from cookbook_engine.rl.data import datum_from_rollout, for_training
from cookbook_engine.rl.loop import Substep, collect, queue_sampling_client, transcript_rows
from cookbook_engine.rl.types import RolloutGroup
from cookbook_engine.training.common import (
    adam_params,
    lr_multiplier,
    start_training_client,
    tokenizer_for,
)
from cookbook_engine.training.learning_rate import learning_rate
from cookbook_engine.training.skeleton import LoopPlan, LoopSkeleton

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import SamplingClient, TrainingClient
    from cookbook_engine.training.context import RunContext


@dataclass
class PreparedDistill:
    prompts: list[list[dict]]  # each a conversation ending with the user's turn
    renderer: str
    tokenizer: Any
    longest_prompt: int

    def summary(self) -> str:
        return f"{len(self.prompts)} prompts, renderer {self.renderer}, longest prompt {self.longest_prompt} tokens"


def prompts_of(spec: str) -> list[list[dict]]:
    """The conversations the student answers: a chat dataset's conversations up to their last assistant reply
    (duplicates once), or a prompt file's prompts as user messages."""
    if datasets.detect_kind(spec) == "rl":
        train, _ = datasets.load_rl_problems(spec, test_fraction=0.0)
        return [[{"role": "user", "content": problem.prompt}] for problem in train]
    chats = datasets.load_chat_dataset(spec, test_fraction=0.0)
    prompts, seen = [], set()
    for messages in chats.train:
        last_reply = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages))
        prompt = messages[:last_reply]
        key = repr(prompt)
        if prompt and prompt[-1]["role"] == "user" and key not in seen:
            seen.add(key)
            prompts.append(prompt)
    if not prompts:
        raise datasets.DatasetError(f"{spec}: no conversation ends with a user turn to answer")
    return prompts


def prepare(config: DistillConfig) -> PreparedDistill:
    tokenizer = tokenizer_for(config)
    renderer = renderers.get_renderer(config.renderer, tokenizer)
    prompts = prompts_of(config.dataset)
    # mode=prompt: the teacher's prompts carry the context (a bad one is refused here, before a run exists)
    context = prompt_mode.context_messages(config.context) if config.mode == "prompt" else []
    lengths = [renderer.build_generation_prompt(prompt_mode.with_context(context, p)).length for p in prompts]
    longest = max(lengths)
    if longest + config.max_tokens > config.max_length:
        raise datasets.DatasetError(
            f"{config.dataset}: prompt {lengths.index(longest) + 1} has {longest} tokens; with "
            f"max_tokens={config.max_tokens} it exceeds max_length={config.max_length}"
        )
    return PreparedDistill(prompts, renderer.name, tokenizer, longest)


def plan(config: DistillConfig, prepared: PreparedDistill) -> LoopPlan:
    """max_steps, or else num_epochs passes over the prompts in batches of groups_per_batch (mode=prompt: over the
    teacher's replies in batches of batch_size, as SL)."""
    if config.mode == "prompt":
        return prompt_mode.plan(config, len(prepared.prompts) * config.group_size)
    batches_per_epoch = max(1, len(prepared.prompts) // config.groups_per_batch)
    total_steps = config.max_steps or batches_per_epoch * config.num_epochs
    return LoopPlan(
        total_steps, batches_per_epoch, total_steps * config.groups_per_batch * config.group_size * config.max_tokens
    )


def prompts_at(prompts: list[list[dict]], step: int, per_batch: int, seed: int) -> list[list[dict]]:
    """The step's prompts: each epoch a fresh shuffle (by seed and epoch), so a resumed run sees the same ones."""
    per_epoch = max(1, len(prompts) // per_batch)
    epoch, batch = divmod(step, per_epoch)
    order = list(range(len(prompts)))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return [prompts[i] for i in order[batch * per_batch : (batch + 1) * per_batch]]


async def distill_step(
    step: int,
    prompts: list[list[dict]],
    renderer: Any,
    client: TrainingClient,
    sampling_client: SamplingClient,
    teacher: SamplingClient,
    config: DistillConfig,
    lr: float,
) -> tuple[list[RolloutGroup], dict[str, float], SamplingClient]:
    """Sample, score with the teacher, train: (groups, metrics, the next sampling client)."""
    started = time.perf_counter()
    seeds = [config.seed * 7919 + step * 1000 + index for index in range(len(prompts))]
    groups_P = list(
        await asyncio.gather(*[sample_group(p, renderer, sampling_client, config, s) for p, s in zip(prompts, seeds)])
    )
    metrics: dict[str, float] = {"time/sample": time.perf_counter() - started}
    started = time.perf_counter()
    data_D = [datum_from_rollout(rollout, 0.0) for group in groups_P for rollout in group.rollouts_G]
    metrics.update(await kl.add_teacher_advantages(data_D, teacher, config.kl_penalty_coef))
    metrics["time/teacher"] = time.perf_counter() - started
    started = time.perf_counter()
    fb_future = await client.forward_backward_async([for_training(d) for d in data_D], "importance_sampling")
    substep = Substep([(data_D, fb_future)], await client.optim_step_async(adam_params(config, lr)))
    next_client = queue_sampling_client(client)
    metrics.update(await collect([substep]))
    metrics["time/train"] = time.perf_counter() - started
    completion_tokens = [len(r.tokens) for g in groups_P for r in g.rollouts_G]
    metrics["ac_tokens_per_turn"] = sum(completion_tokens) / max(1, len(completion_tokens))
    metrics["optim/num_datums"] = float(len(data_D))
    return groups_P, metrics, await next_client


async def train(config: DistillConfig, ctx: RunContext, prepared: PreparedDistill | None = None) -> None:
    prepared = prepared or prepare(config)
    if config.mode == "prompt":
        return await prompt_mode.train(config, ctx, prepared)
    renderer = renderers.get_renderer(prepared.renderer, prepared.tokenizer)
    service, client, start_step = start_training_client(config, ctx.resume, ctx)
    teacher = teacher_client(service, config, getattr(ctx, "store", None))
    base_lr = learning_rate(config)
    run_plan = plan(config, prepared)
    loop = LoopSkeleton(config, ctx, client, run_plan, start_step, PeriodicEvals(None, NamedEvals.for_config(config)))
    loop.start(
        f"On-policy distillation of {config.model} from teacher {config.teacher}: {prepared.summary()}; "
        f"{run_plan.total_steps} steps of {config.groups_per_batch} prompts x {config.group_size} samples, "
        f"KL weight {config.kl_penalty_coef:g}, lr {base_lr:g}"
    )
    sampling_client = await client.save_weights_and_get_sampling_client_async()
    for step in loop.steps():
        step_started = time.perf_counter()
        metrics = await loop.evaluations_due(step, sampling_client)
        lr = base_lr * lr_multiplier(config.lr_schedule, step, run_plan.total_steps)
        prompts = prompts_at(prepared.prompts, step, config.groups_per_batch, config.seed)
        groups_P, step_metrics, sampling_client = await distill_step(
            step, prompts, renderer, client, sampling_client, teacher, config, lr
        )
        metrics.update(step_metrics)
        metrics.update({"optim/lr": lr, "progress": (step + 1) / run_plan.total_steps})
        metrics["time/total"] = time.perf_counter() - step_started
        advantages_P = [[0.0] * len(group.rollouts_G) for group in groups_P]
        rows = transcript_rows(step, groups_P, advantages_P, [False] * len(groups_P), prepared.tokenizer)
        ctx.logger.log_transcripts(rows)
        ctx.logger.log_metrics(step, metrics)
        ctx.progress(step + 1, run_plan.total_steps)
        if loop.save_due(step + 1):
            await loop.save(step + 1)
    await loop.finish(sampling_client)
