"""Chatting with models: which models a person can talk to, and a streamed reply from one of them.

A chat target is a base model, a saved checkpoint (its sampler weights), or the "latest weights" of a run that
is still training: the newest sampler checkpoint that run has saved (the loops save one every `save_every` steps),
resolved again for every reply and sampled through a FRESH sampling client, since a sampling client keeps the
weights it was made with. `stream_reply()` yields the reply as it is generated: it samples in chunks (8 tokens
first, so text appears quickly, then doubling, so a long reply costs only a few requests even when the model's
work queue is shared with a training run), feeding the growing completion back as the prompt.

Not here: chat history or any UI (the studio keeps the conversation), training, or exporting weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tinker import types

from cookbook_engine import models, renderers
from cookbook_engine.backends import service_client
from storage import Store

ACTIVE_STATUSES = ("queued", "running", "cancelling")
FIRST_CHUNK_TOKENS = 8
MAX_CHUNK_TOKENS = 128


class ChatError(ValueError):
    """A chat target that cannot answer (no weights saved yet, a missing checkpoint); the message says why."""


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


def list_targets(store: Store | None = None) -> list[ChatTarget]:
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
        if run["status"] in ACTIVE_STATUSES:
            step = f"step {run['step']}" if run.get("step") is not None else "starting"
            targets.append(ChatTarget(f"latest:{run['run_id']}", f"Latest weights · {run['name']} ({run['status']}, "
                                      f"{step})", "latest", run["base_model"], run["backend"], None, run["run_id"],
                                      _renderer_of(run)))
    for checkpoint in store.list_checkpoints():
        run = runs_by_id.get(checkpoint["run_id"])
        if run is None or not checkpoint.get("sampler_path"):
            continue
        final = " (final)" if (checkpoint.get("loop_state") or {}).get("final") else ""
        targets.append(ChatTarget(f"checkpoint:{checkpoint['sampler_path']}",
                                  f"{run['name']} · step {checkpoint['step']}{final}", "checkpoint",
                                  run["base_model"], run["backend"], checkpoint["sampler_path"], run["run_id"],
                                  _renderer_of(run)))
    return targets


def _renderer_of(run: dict) -> str:
    return (run.get("config") or {}).get("renderer") or "auto"


def latest_sampler_path(run_id: str, store: Store | None = None) -> str:
    """The sampler weights of the run's newest checkpoint; ChatError when it has saved none yet."""
    store = store or Store.default()
    run = store.get_run(run_id)
    if run is None:
        raise ChatError(f"run {run_id}: not found (was it deleted?)")
    saved = [c for c in store.list_checkpoints(run_id) if c.get("sampler_path")]
    if not saved:
        every = (run.get("config") or {}).get("save_every")
        when = f"it saves every {every} steps" if every else "it saves only at the end"
        raise ChatError(f"run {run['name']}: no weights saved yet ({when}); chat with it after its first save")
    newest = max(saved, key=lambda c: (c["step"], c["created_at"]))
    return newest["sampler_path"]


def sampling_client(target: ChatTarget, store: Store | None = None):
    """A new sampling client for the target (for "latest", on the run's newest saved weights right now)."""
    service = service_client(target.backend)
    if target.kind == "base":
        return service.create_sampling_client(base_model=target.base_model)
    path = latest_sampler_path(target.run_id, store) if target.kind == "latest" else target.model_path
    try:
        return service.create_sampling_client(model_path=path)
    except FileNotFoundError as exc:
        raise ChatError(f"checkpoint {path}: its files are gone ({exc})") from exc


def stream_reply(target: ChatTarget, messages: list[dict], params: ChatParams | None = None,
                 store: Store | None = None) -> Iterator[str]:
    """Yield the assistant's reply to `messages` piece by piece (the pieces join into the whole reply)."""
    params = params or ChatParams()
    if params.max_tokens < 1:
        raise ChatError(f"max_tokens={params.max_tokens}: must be at least 1")
    client = sampling_client(target, store)
    tokenizer = client.get_tokenizer()
    renderer = renderers.get_renderer(target.renderer, tokenizer)
    prompt_T = renderer.build_generation_prompt(messages).to_ints()
    stop = renderer.get_stop_sequences()
    completion_T: list[int] = []
    shown = ""
    chunk = FIRST_CHUNK_TOKENS
    while len(completion_T) < params.max_tokens:
        want = min(chunk, params.max_tokens - len(completion_T))
        seed = None if params.seed is None else params.seed + len(completion_T)
        sampling = types.SamplingParams(max_tokens=want, temperature=params.temperature, top_p=params.top_p,
                                        stop=stop, seed=seed)
        response = client.sample(types.ModelInput.from_ints(prompt_T + completion_T), 1, sampling).result()
        sequence = response.sequences[0]
        completion_T += list(sequence.tokens)
        message, ended = renderer.parse_response(completion_T)
        text = message["content"]
        stopped = ended or sequence.stop_reason == "stop" or not sequence.tokens
        if not stopped:
            text = text.rstrip("\ufffd")  # a multi-byte character cut in half: wait for its other bytes
        if text.startswith(shown) and len(text) > len(shown):
            yield text[len(shown):]
            shown = text
        if stopped:
            return
        chunk = min(chunk * 2, MAX_CHUNK_TOKENS)


def reply(target: ChatTarget, messages: list[dict], params: ChatParams | None = None,
          store: Store | None = None) -> str:
    """The whole reply at once."""
    return "".join(stream_reply(target, messages, params, store))
