"""Prompt distillation (context distillation), as tinker-cookbook's recipes/prompt_distillation does it.

Two stages in one run. First the teacher (the base model, a checkpoint, or a hosted model) answers every prompt
`group_size` times with the **context** before it (a system prompt, a built-in context such as `builtin:pip`, or a
.json file of messages: a system prompt and example turns); the replies are kept in the run folder
(`teacher_replies.jsonl`, the recipe's data file), so a resumed run does not sample again. Then the student (a LoRA
on the base model, fresh or from `start_checkpoint`) is trained with SL on each prompt **without** the context and
the teacher's reply as the answer: it learns to behave as if the context were there. Replies the teacher did not
finish within max_tokens are dropped (a cut-off reply would teach the student to stop mid-sentence).

Metrics: SL's (train_mean_nll, learning_rate, ...), and `teacher_kl`: per reply token, the teacher's log-prob of its
own reply with the context minus the student's without it, a sample estimate of KL(teacher with context ‖ student)
that falls as the student learns (exact at temperature 1: the sampler's log-probs are the untempered ones). The
eval sets named in `evals=` (e.g. builtin:persona-probes) score the student as it trains. The teacher's replies are
transcript rows of step 0, each prompt shown with the context the teacher saw.

Not here: the on-policy mode (loop.py dispatches to this module), SL's steps (sl/loop.py's run_steps).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker import types

from cookbook_engine import renderers
from cookbook_engine.config import DistillConfig
from cookbook_engine.data import builtin as builtin_data, loading as datasets
from cookbook_engine.distill.sampling import sample_group, teacher_client
from cookbook_engine.evals.in_training import NamedEvals, PeriodicEvals
from cookbook_engine.rl.loop import transcript_rows
from cookbook_engine.rl.types import RolloutGroup
from cookbook_engine.sl import loop as sl_loop
from cookbook_engine.training.common import datum_from_tokens, fit_length, start_training_client
from cookbook_engine.training.learning_rate import learning_rate
from cookbook_engine.training.plan import plan_steps
from cookbook_engine.training.skeleton import LoopPlan, LoopSkeleton, passes_note

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import SamplingClient
    from cookbook_engine.training.context import RunContext

REPLIES_FILE = "teacher_replies.jsonl"
ROLES = ("system", "user", "assistant")
BUILTIN_PREFIX = "builtin:"


class ContextError(datasets.DatasetError):
    """A context that cannot be used; the message names it and what is wrong."""


@dataclass
class TeacherReply:
    """One reply of the teacher: the prompt (without the context), the reply's text, and the teacher's summed
    log-prob of the reply's sampled tokens with the context before the prompt."""

    prompt: list[dict]
    reply: str
    teacher_logprob: float
    tokens: int


def context_messages(spec: str) -> list[dict]:
    """The messages a context names: builtin:NAME, a .json file (a list of messages, or {"messages": [...]}), or else
    the text itself as a system prompt."""
    text = spec.strip()
    if not text:
        raise ContextError("context: empty; mode=prompt needs what the teacher sees before each prompt")
    if text.startswith(BUILTIN_PREFIX):
        name = text[len(BUILTIN_PREFIX) :]
        if name not in builtin_data.CONTEXTS:
            names = ", ".join(BUILTIN_PREFIX + n for n in builtin_data.CONTEXTS)
            raise ContextError(f"context={text}: no such built-in context; choose {names}, a .json file or text")
        return [dict(m) for m in builtin_data.CONTEXTS[name]]
    if text.endswith(".json") and "\n" not in text:
        return _context_file(Path(text).expanduser())
    return [{"role": "system", "content": text}]


def _context_file(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ContextError(f"context={path}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ContextError(f"context={path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    messages = data.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list) or not messages:
        raise ContextError(f'context={path}: expected a list of messages or {{"messages": [...]}}')
    for index, message in enumerate(messages, 1):
        valid = isinstance(message, dict) and message.get("role") in ROLES and isinstance(message.get("content"), str)
        if not valid:
            raise ContextError(f"context={path}: message {index} needs a role ({', '.join(ROLES)}) and text content")
        if message["role"] == "system" and index > 1:
            raise ContextError(f"context={path}: message {index} is a system message; only the first may be")
    if messages[-1]["role"] == "user":
        raise ContextError(f"context={path}: the last message is the user's; the prompt follows the context")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def with_context(context: list[dict], prompt: list[dict]) -> list[dict]:
    """The conversation the teacher answers: the context, then the prompt (a system message of both is joined)."""
    if context and prompt and context[0]["role"] == "system" and prompt[0]["role"] == "system":
        joined = {"role": "system", "content": context[0]["content"] + "\n\n" + prompt[0]["content"]}
        return [joined, *context[1:], *prompt[1:]]
    return [*context, *prompt]


def plan(config: DistillConfig, num_replies: int) -> LoopPlan:
    """SL's plan over `num_replies` teacher replies (before sampling: every prompt's group_size replies)."""
    batches_per_epoch, total_steps = plan_steps(config, num_replies)
    tokens = total_steps * min(config.batch_size, num_replies) * config.max_tokens
    return LoopPlan(total_steps, batches_per_epoch, tokens)


async def sample_teacher(
    prompts: list[list[dict]], context: list[dict], renderer: Any, teacher: SamplingClient, config: DistillConfig
) -> tuple[list[TeacherReply], list[RolloutGroup], int]:
    """(the finished replies, every prompt's group of replies for the transcripts, how many were cut off)."""
    seeds = [config.seed * 7919 + index for index in range(len(prompts))]
    groups_P = list(
        await asyncio.gather(
            *[sample_group(with_context(context, p), renderer, teacher, config, s) for p, s in zip(prompts, seeds)]
        )
    )
    replies, cut = [], 0
    for prompt, group in zip(prompts, groups_P):
        for rollout in group.rollouts_G:
            message, ended = renderer.parse_response(rollout.tokens)
            if not ended:
                cut += 1
                continue
            replies.append(TeacherReply(prompt, message["content"], float(sum(rollout.logprobs)), len(rollout.tokens)))
    return replies, groups_P, cut


def save_replies(path: Path, replies: list[TeacherReply]) -> None:
    """The teacher's replies as the recipe's data file (a chat row each, with the teacher's log-prob beside it)."""
    rows = [{"messages": [*r.prompt, {"role": "assistant", "content": r.reply}], **_scores(r)} for r in replies]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _scores(reply: TeacherReply) -> dict:
    return {k: v for k, v in asdict(reply).items() if k in ("teacher_logprob", "tokens")}


def load_replies(path: Path) -> list[TeacherReply]:
    replies = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        messages = row["messages"]
        replies.append(TeacherReply(messages[:-1], messages[-1]["content"], row["teacher_logprob"], row["tokens"]))
    return replies


@dataclass
class StudentData:
    """The student's datums (prompt without the context, the teacher's reply as the answer) and, by datum, the
    teacher's summed log-prob and token count of that reply."""

    datums: list[types.Datum]
    teacher_by_datum: dict[int, tuple[float, int]]

    def derive(self, data: list[types.Datum], _output: Any, metrics: dict[str, float]) -> None:
        """teacher_kl and distill/teacher_logprob of a finished step's batch (per reply token)."""
        scored = [self.teacher_by_datum[id(d)] for d in data if id(d) in self.teacher_by_datum]
        tokens = sum(n for _, n in scored)
        if tokens and "train_mean_nll" in metrics:
            teacher_logprob = sum(lp for lp, _ in scored) / tokens
            metrics["distill/teacher_logprob"] = teacher_logprob
            metrics["distill/student_logprob"] = -metrics["train_mean_nll"]
            metrics["teacher_kl"] = teacher_logprob + metrics["train_mean_nll"]


def student_data(replies: list[TeacherReply], renderer: Any, config: DistillConfig) -> StudentData:
    datums, teacher_by_datum = [], {}
    for reply in replies:
        tokens, weights = renderer.build_supervised_example(
            [*reply.prompt, {"role": "assistant", "content": reply.reply}], "last_assistant_message"
        )
        fitted = fit_length(tokens, weights, config.max_length, "drop")
        if fitted is None:
            continue
        datum = datum_from_tokens(*fitted)
        datums.append(datum)
        teacher_by_datum[id(datum)] = (reply.teacher_logprob, reply.tokens)
    return StudentData(datums, teacher_by_datum)


async def teacher_replies(
    config: DistillConfig, ctx: RunContext, prompts: list[list[dict]], renderer: Any, service: Any, tokenizer: Any
) -> list[TeacherReply]:
    """The teacher's replies: read back from the run folder on resume, else sampled now (and saved there)."""
    path = ctx.log_dir / REPLIES_FILE
    if path.exists():
        replies = load_replies(path)
        ctx.note(f"Teacher's replies read back from {path.name}: {len(replies)}")
        return replies
    context = context_messages(config.context)
    teacher = teacher_client(service, config, getattr(ctx, "store", None))
    ctx.note(
        f"Sampling the teacher ({config.teacher}) with the context ({len(context)} messages): {len(prompts)} prompts "
        f"x {config.group_size} replies of at most {config.max_tokens} tokens"
    )
    replies, groups_P, cut = await sample_teacher(prompts, context, renderer, teacher, config)
    ctx.logger.log_transcripts(
        transcript_rows(0, groups_P, [[0.0] * len(g.rollouts_G) for g in groups_P], [False] * len(groups_P), tokenizer)
    )
    if not replies:
        raise datasets.DatasetError(
            f"the teacher finished none of its {cut} replies within max_tokens={config.max_tokens}; raise max_tokens"
        )
    save_replies(path, replies)
    ctx.note(f"Teacher's replies: {len(replies)} kept, {cut} not finished within max_tokens dropped")
    return replies


async def train(config: DistillConfig, ctx: RunContext, prepared: Any) -> None:
    renderer = renderers.get_renderer(prepared.renderer, prepared.tokenizer)
    service, client, start_step = start_training_client(config, ctx.resume, ctx)
    replies = await teacher_replies(config, ctx, prepared.prompts, renderer, service, prepared.tokenizer)
    data = student_data(replies, renderer, config)
    if not data.datums:
        raise datasets.DatasetError(f"no teacher reply fits max_length={config.max_length} with its prompt")
    base_lr = learning_rate(config)
    run_plan = plan(config, len(data.datums))
    loop = LoopSkeleton(config, ctx, client, run_plan, start_step, PeriodicEvals(None, NamedEvals.for_config(config)))
    loop.start(
        f"Prompt distillation of {config.model} from teacher {config.teacher} with context {config.context[:60]!r}: "
        f"{len(data.datums)} teacher replies to {len(prepared.prompts)} prompts; {run_plan.total_steps} steps of "
        f"{config.batch_size} = {passes_note(config, run_plan.batches_per_epoch, run_plan.total_steps)}, "
        f"lr {base_lr:g} ({config.lr_schedule})"
    )
    await sl_loop.run_steps(config, ctx, client, loop, data.datums, base_lr, data.derive)
