"""Chatting with models: which models a person can talk to, and a streamed reply from one of them.

A chat target is a base model, a saved checkpoint (its sampler weights), or the "latest weights" of a run that
is still training, resolved again for every reply through a FRESH sampling client (a sampling client keeps the
weights it was made with). When the run trains in this process, the reply samples from the run's live weights: the
run's training client is asked for `save_weights_and_get_sampling_client()`, which the model worker runs in order
with the run's own requests, so the snapshot falls between two optimizer steps, even before the run's first save.
When the run trains in another process (a CLI run), its live weights are out of reach: the reply samples from the
newest sampler weights it has saved, and `Weights.description` says so.

`stream_reply()` yields the reply as it is generated and keeps it in a `Reply` (text, tokens, why it ended), which
a caller hands back to continue a reply that was interrupted. It samples in chunks (8 tokens first, so text appears
quickly, then doubling, so a long reply costs only a few requests even when the model's work queue is shared with
a training run), feeding the growing completion back as the prompt.

Not here: chat history or any UI (the studio keeps the conversation), training, or exporting weights.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from tinker import types

from cookbook_engine import models, renderers
from cookbook_engine.backends import service_client
from storage import RunStore, Store, statuses
from storage.input_error import InputError

logger = logging.getLogger(__name__)

FIRST_CHUNK_TOKENS = 8
MAX_CHUNK_TOKENS = 128


class ChatError(InputError, ValueError):
    """A chat target that cannot answer (a run in another process that saved nothing yet, a missing checkpoint);
    the message says why."""


@dataclass(frozen=True)
class ChatTarget:
    key: str  # stable id: "base:BACKEND:MODEL", "checkpoint:PATH" or "latest:RUN_ID"
    label: str  # what a person reads in a picker
    kind: str  # "base" | "checkpoint" | "latest"
    base_model: str
    backend: str = "local"
    model_path: str | None = None  # sampler weights (checkpoints only; "latest" resolves at reply time)
    run_id: str | None = None
    renderer: str = "auto"


@dataclass
class ChatParams:
    temperature: float = 0.7
    top_p: float = 0.9
    max_tokens: int = 256
    seed: int | None = None


def base_target(model: str = models.DEFAULT_MODEL, backend: str = "local") -> ChatTarget:
    model = models.canonical_name(model)
    short = model.rsplit("/", 1)[-1]
    where = "" if backend == "local" else f" · {backend}"
    return ChatTarget(f"base:{backend}:{model}", f"Base model · {short}{where}", "base", model, backend)


def list_targets(store: RunStore | None = None) -> list[ChatTarget]:
    """Base models first (the default and every base model a run used), then the latest weights of each active
    run, then every saved checkpoint with sampler weights, newest first."""
    store = store or Store.default()
    run_rows = store.list_runs()
    runs_by_id = {run["run_id"]: run for run in run_rows}
    targets = [base_target()]
    seen = {targets[0].key}
    for run in run_rows:
        target = base_target(run["base_model"], run["backend"])
        if target.key not in seen:
            seen.add(target.key)
            targets.append(target)
    for run in run_rows:
        if run["status"] in statuses.ACTIVE:
            targets.append(
                ChatTarget(
                    f"latest:{run['run_id']}",
                    f"Latest weights · {run['name']} (training)",  # the same while it trains: a browser's picker
                    # holds the label it showed, and one naming the step was lost at the next step
                    "latest",
                    run["base_model"],
                    run["backend"],
                    None,
                    run["run_id"],
                    _renderer_of(run),
                )
            )
    for checkpoint in store.list_checkpoints():
        owner = runs_by_id.get(checkpoint["run_id"])
        if owner is None or not checkpoint.get("sampler_path"):
            continue
        final = " (final)" if (checkpoint.get("loop_state") or {}).get("final") else ""
        targets.append(
            ChatTarget(
                f"checkpoint:{checkpoint['sampler_path']}",
                f"{owner['name']} · step {checkpoint['step']}{final}",
                "checkpoint",
                owner["base_model"],
                owner["backend"],
                checkpoint["sampler_path"],
                owner["run_id"],
                _renderer_of(owner),
            )
        )
    return targets


def _renderer_of(run: dict) -> str:
    return (run.get("config") or {}).get("renderer") or "auto"


@dataclass
class Weights:
    """What one reply samples from: a fresh sampling client, and where its weights came from."""

    client: Any
    source: str  # "base" | "checkpoint" | "live" (a snapshot of a run training here) | "saved" (newest saved)
    step: int | None = None  # the run's step the weights belong to ("live": steps finished when asked)
    description: str = ""  # for people, e.g. "newest saved weights, step 4"


def newest_saved_checkpoint(run_id: str, store: RunStore | None = None) -> dict:
    """The run's newest checkpoint with sampler weights; ChatError when it has saved none yet."""
    store = store or Store.default()
    run = store.get_run(run_id)
    if run is None:
        raise ChatError(f"run {run_id}: not found (was it deleted?)")
    saved = [c for c in store.list_checkpoints(run_id) if c.get("sampler_path")]
    if not saved:
        every = (run.get("config") or {}).get("save_every")
        when = f"it saves every {every} steps" if every else "it saves only at the end"
        if run["status"] not in statuses.ACTIVE:
            raise ChatError(f"run {run['name']}: it saved no weights ({run['status']} before its first save)")
        raise ChatError(
            f"run {run['name']}: it trains in another process (e.g. the CLI), so only its saved weights "
            f"can be reached, and it has saved none yet ({when}); chat with it after its first save"
        )
    return max(saved, key=lambda c: (c["step"], c["created_at"]))


def _live_weights(run: dict, manager) -> Weights | None:
    """A snapshot of the live weights of a run this process started: taken from its training client when it trains
    on a thread here (the CLI's way), asked of its training process when it trains in a child of this one (the
    studio's way). None when it trains elsewhere (e.g. the CLI), has no training client yet, or just ended."""
    step = int(run.get("step") or 0)  # steps finished before the snapshot was asked for (it has at least these)
    training_client = manager.live_training_client(run["run_id"])
    try:
        if training_client is not None:
            client = _resolved(training_client.save_weights_and_get_sampling_client())
            how = "a fresh snapshot of the run's training client"
        else:
            path = manager.live_snapshot_path(run["run_id"])
            if path is None:
                return None
            client = _resolved(service_client(run["backend"]).create_sampling_client(model_path=path))
            how = "a snapshot its training process saved just now"
    except Exception:  # the run ended (and freed its weights) in the meantime: use what it saved
        logger.info("the live weights could not be snapshotted; chatting with the last saved ones", exc_info=True)
        return None
    return Weights(client, "live", step, f"live weights of {run['name']} at step {step} ({how})")


def _resolved(client):
    """Client-creation methods return a future of the client (as the tinker SDK's do): wait for it here."""
    return client.result() if hasattr(client, "result") else client


def open_weights(target: ChatTarget, store: RunStore | None = None) -> Weights:
    """A new sampling client for the target. For "latest": the live weights of a run training in this process,
    else the newest weights the run has saved."""
    store = store or Store.default()
    if target.kind == "base":
        sampler = service_client(target.backend).create_sampling_client(base_model=target.base_model)
        return Weights(_resolved(sampler), "base", None, target.label)
    step = None
    if target.kind == "latest":
        if target.run_id is None:
            raise ChatError(f"{target.label}: names no run")
        run = store.get_run(target.run_id)
        if run is None:
            raise ChatError(f"run {target.run_id}: not found (was it deleted?)")
        from cookbook_engine.runs import get_manager

        manager = get_manager()
        live = _live_weights(run, manager) if run["status"] in statuses.ACTIVE else None
        if live is not None:
            return live
        here = manager.is_alive(target.run_id)
        if here and not any(c.get("sampler_path") for c in store.list_checkpoints(target.run_id)):
            raise ChatError(
                f"run {run['name']}: still starting (loading its model); its weights can be chatted with in a moment"
            )
        checkpoint = newest_saved_checkpoint(target.run_id, store)
        path, step, source = checkpoint["sampler_path"], int(checkpoint["step"]), "saved"
        why = (
            "the run is starting or just ended"
            if here
            else "the run trains in another process, e.g. the CLI, so its live weights are out of reach"
            if run["status"] in statuses.ACTIVE
            else f"the run is {run['status']}"
        )
        description = f"newest saved weights, step {step} ({why})"
    else:
        path, source, description = target.model_path, "checkpoint", target.label
    try:  # a service client only now: a live snapshot above needs none
        return Weights(
            _resolved(service_client(target.backend).create_sampling_client(model_path=path)), source, step, description
        )
    except FileNotFoundError as exc:
        raise ChatError(f"checkpoint {path}: its files are gone ({exc})") from exc


@dataclass
class Reply:
    """One assistant reply as it is generated: the text so far, the completion tokens behind it, and why it ended.

    `stream_reply()` updates it after every chunk, before the chunk's text is yielded, so a reply whose generation
    was interrupted (the page reran) keeps every token produced, and passing it back continues where it stopped.
    Streamlit starts the rerun on a new thread while the old one may still wait for its chunk: that old call sees
    it no longer owns the reply (or that someone stopped it) and drops its chunk instead of writing into it."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    finish: str | None = None  # None while generating; "stop" (the model ended it), "length" (max_tokens), "stopped"
    prompt_tokens: int = 0  # the rendered conversation's length in tokens (the OpenAI endpoint's usage counts it)
    generation: int = 0  # bumped by each stream_reply() call on it: the newest one owns it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


def stream_reply(
    target: ChatTarget,
    messages: list[dict],
    params: ChatParams | None = None,
    store: RunStore | None = None,
    weights: Weights | None = None,
    reply: Reply | None = None,
) -> Generator[str]:
    """Yield the assistant's reply to `messages` piece by piece (the pieces join into the whole reply), sampled
    from `weights` (default: `open_weights(target)`, fresh for this reply). With a `reply` that already holds
    tokens, its text is yielded first and generation continues after its tokens; `reply.finish` ends as "stop" or
    "length" (cut at `params.max_tokens`, counting the tokens it already had)."""
    params = params or ChatParams()
    if params.max_tokens < 1:
        raise ChatError(f"max_tokens={params.max_tokens}: must be at least 1")
    reply = reply if reply is not None else Reply()
    client = (weights or open_weights(target, store)).client
    renderer = renderers.get_renderer(target.renderer, client.get_tokenizer())
    prompt_T = renderer.build_generation_prompt(messages).to_ints()
    stop = renderer.get_stop_sequences()
    with reply.lock:
        reply.generation += 1
        reply.prompt_tokens = len(prompt_T)
        mine, shown, tokens_T = reply.generation, reply.text, list(reply.tokens)
    if shown:
        yield shown
    chunk = FIRST_CHUNK_TOKENS
    while len(tokens_T) < params.max_tokens:
        want = min(chunk, params.max_tokens - len(tokens_T))
        seed = None if params.seed is None else params.seed + len(tokens_T)
        sampling = types.SamplingParams(
            max_tokens=want, temperature=params.temperature, top_p=params.top_p, stop=stop, seed=seed
        )
        sequence = client.sample(types.ModelInput.from_ints(prompt_T + tokens_T), 1, sampling).result().sequences[0]
        tokens_T = tokens_T + list(sequence.tokens)
        message, ended = renderer.parse_response(tokens_T)
        stopped = ended or sequence.stop_reason == "stop" or not sequence.tokens
        # a multi-byte character cut in half waits for its other bytes
        text = message["content"] if stopped else message["content"].rstrip("\ufffd")
        finish = "stop" if stopped else "length" if len(tokens_T) >= params.max_tokens else None
        with reply.lock:
            if reply.generation != mine or reply.finish is not None:
                return  # continued by a newer call, or stopped: this chunk is not ours to write
            reply.tokens, reply.finish = tokens_T, finish
            piece = text[len(shown) :] if text.startswith(shown) else ""
            if piece:
                reply.text = shown = text
        if piece:
            yield piece
        if finish:
            return
        chunk = min(chunk * 2, MAX_CHUNK_TOKENS)
    with reply.lock:  # it had max_tokens tokens already (the limit was lowered before it was continued)
        if reply.generation == mine and reply.finish is None:
            reply.finish = "length"


def reply(
    target: ChatTarget, messages: list[dict], params: ChatParams | None = None, store: RunStore | None = None
) -> str:
    """The whole reply at once."""
    return "".join(stream_reply(target, messages, params, store))
