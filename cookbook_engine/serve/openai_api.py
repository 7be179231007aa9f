"""OpenAI-compatible routes of `cookbook serve`: `/v1/models`, `/v1/chat/completions` (streamed as server-sent
events or not) and `/v1/completions`, so users' own tools (the `openai` client, anything that takes a base_url) call
the base model and every local checkpoint.

Models: the base models of this studio home (the default and any a local run trained), and each local checkpoint with
sampler weights under two ids: its `tinker://<training run>/sampler_weights/<name>` path and the short id
`<run id>:<checkpoint name>` that the Checkpoints page shows (its folder path works too). Chat replies come from the
engine's own chat code (`chat.stream_reply`: the model's chat template through the renderer, sampled on the local
backend's worker, shared with the studio's runs); completions sample the raw prompt through the same sampling client.
Honoured: temperature (0 = greedy), top_p, max_tokens (`max_completion_tokens` too), stop (up to 4 strings; the
reply ends before them), n (replies sampled one after another), seed, stream with `stream_options.include_usage`,
and usage token counts. Refused with 400 (OpenAI's error shape, naming the parameter): tools, logprobs, echo,
response formats other than text, and values out of range; an unknown model answers 404 listing the ids to use.
`/v1/completions` with stream=true sends each choice's text as one chunk.

The same rules as every other route of the server hold (guard.py: localhost Host and Origin only, JSON bodies, size
limit; any API key). Not here: the Tinker API routes (app.py), chat history, training.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tinker import types

from cookbook_engine import chat, models
from cookbook_engine.backends import compat
from storage import RunStore, Store
from storage.home import db_path

DEFAULT_CHAT_MAX_TOKENS = 256  # the studio's Chat page's default; OpenAI's "as many as fit" would be the context
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_N = 8
OWNER = "cookbook-studio"


class OpenAIError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


# ------------------------------------------------------------------------------------------ the requests


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields clients send that change nothing here (user, metadata) pass

    model: str
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=32768)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    logprobs: bool | int | None = None

    def stops(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise OpenAIError(400, "stop: up to 4 non-empty strings", "stop")
        return stops


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Request):
    messages: list[_Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=32768)
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(_Request):
    prompt: str | list[str]
    echo: bool = False
    suffix: str | None = None


def _parse(cls: type[_Request], body: Any) -> Any:
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise OpenAIError(400, f"{where}: {error['msg']}", where) from None


def _refuse_unsupported(request: _Request) -> None:
    if request.logprobs:
        raise OpenAIError(400, "logprobs: not supported by cookbook serve", "logprobs")
    if isinstance(request, ChatRequest):
        if request.tools:
            raise OpenAIError(400, "tools: cookbook serve does not call tools", "tools")
        if request.response_format and request.response_format.get("type") not in (None, "text"):
            raise OpenAIError(400, "response_format: only text replies", "response_format")
    if isinstance(request, CompletionRequest) and (request.echo or request.suffix):
        raise OpenAIError(400, "echo and suffix: not supported by cookbook serve", "echo" if request.echo else "suffix")


def _text_of(message: _Message) -> str:
    """A message's text; content parts must be text ({"type": "text", "text": ...})."""
    if isinstance(message.content, str) or message.content is None:
        return message.content or ""
    texts = []
    for part in message.content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise OpenAIError(400, f"messages: only text content parts, got type {part.get('type')!r}", "messages")
        texts.append(part["text"])
    return "".join(texts)


# ------------------------------------------------------------------------------------------ the models


@dataclass(frozen=True)
class ServedModel:
    id: str
    target: chat.ChatTarget
    created: int
    aliases: tuple[str, ...] = ()  # other ids naming the same model (a checkpoint's short id and folder)


def served_models(store: RunStore | None = None) -> list[ServedModel]:
    """The base models, then every local checkpoint with sampler weights (newest first), each with its ids. A home
    without a database (nothing trained here yet) serves the default model, and no database is made for it."""
    if store is None and not db_path().exists():
        return [ServedModel(models.DEFAULT_MODEL, chat.base_target(), 0)]
    store = store or Store.default()
    runs = {run["run_id"]: run for run in store.list_runs()}
    found = [
        ServedModel(target.base_model, target, 0)
        for target in chat.list_targets(store)
        if target.kind == "base" and target.backend == "local"
    ]
    for row in store.list_checkpoints():
        run = runs.get(row["run_id"])
        folder = row.get("sampler_path")
        if run is None or run["backend"] == "tinker" or not folder:
            continue
        target = chat.ChatTarget(
            f"checkpoint:{folder}",
            f"{run['name']} · step {row['step']}",
            "checkpoint",
            run["base_model"],
            "local",
            folder,
            run["run_id"],
            (run.get("config") or {}).get("renderer") or "auto",
        )
        created = int(row["created_at"].timestamp()) if hasattr(row.get("created_at"), "timestamp") else 0
        path = compat.to_tinker_path(folder) or folder
        found.append(ServedModel(path, target, created, (short_id(row["run_id"], row["name"]), folder)))
    return found


def short_id(run_id: str, checkpoint_name: str) -> str:
    """The checkpoint's short model id, as the Checkpoints page shows it."""
    return f"{run_id}:{checkpoint_name}"


def find_model(model: str, store: RunStore | None = None) -> ServedModel:
    available = served_models(store)
    wanted = models.canonical_name(model) if "://" not in model else model
    for served in available:
        if wanted == served.id or model in (served.id, *served.aliases):
            return served
    raise OpenAIError(
        404,
        f"model {model!r} not found; GET /v1/models lists those served here (base models, and checkpoints by "
        "their tinker:// path or <run id>:<checkpoint name>)",
        "model",
        "model_not_found",
    )


# ------------------------------------------------------------------------------------------ answering


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """The text before the first stop string, and whether one was found."""
    cuts = [text.index(stop) for stop in stops if stop in text]
    return (text[: min(cuts)], True) if cuts else (text, False)


@dataclass
class Choice:
    text: str = ""
    finish: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0


def chat_pieces(served: ServedModel, request: ChatRequest, index: int, done: Choice) -> Iterator[str]:
    """One reply's text piece by piece, held back where a stop string could begin; `done` gets the totals."""
    messages = [
        {"role": "system" if m.role == "developer" else m.role, "content": _text_of(m)} for m in request.messages
    ]
    params = chat.ChatParams(
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_completion_tokens or request.max_tokens or DEFAULT_CHAT_MAX_TOKENS,
        seed=None if request.seed is None else request.seed + index * 1_000_003,  # n replies: n seeds
    )
    stops, reply = request.stops(), chat.Reply()
    hold = max((len(stop) for stop in stops), default=1) - 1
    sent = ""
    pieces = chat.stream_reply(served.target, messages, params, reply=reply)
    try:
        for _ in pieces:
            text, stopped = _cut_at_stop(reply.text, stops)
            ready = text if stopped else text[: len(text) - hold] if hold else text
            if len(ready) > len(sent):
                yield ready[len(sent) :]
                sent = ready
            if stopped:
                break
    finally:
        pieces.close()  # a stop string found: no more chunks are sampled
    text, stopped = _cut_at_stop(reply.text, stops)
    if len(text) > len(sent):
        yield text[len(sent) :]
    done.text, done.finish = text, "stop" if stopped else reply.finish or "stop"
    done.prompt_tokens, done.completion_tokens = reply.prompt_tokens, len(reply.tokens)


def complete(served: ServedModel, request: CompletionRequest, prompt: str, index: int) -> Choice:
    """One completion of a raw prompt (no chat template), sampled in one request."""
    weights = chat.open_weights(served.target)
    prompt_T = weights.client.get_tokenizer().encode(prompt)
    stops = request.stops()
    sampling = types.SamplingParams(
        max_tokens=request.max_tokens or DEFAULT_COMPLETION_MAX_TOKENS,
        temperature=request.temperature,
        top_p=request.top_p,
        stop=stops or None,  # None: the model's end-of-sequence token
        seed=None if request.seed is None else request.seed + index * 1_000_003,
    )
    sequence = weights.client.sample(types.ModelInput.from_ints(prompt_T), 1, sampling).result().sequences[0]
    decoded = weights.client.get_tokenizer().decode(sequence.tokens, skip_special_tokens=True)
    text, stopped = _cut_at_stop(decoded, stops)
    finish = "stop" if stopped or sequence.stop_reason == "stop" else "length"
    return Choice(text, finish, len(prompt_T), len(sequence.tokens))


def _usage(choices: list[Choice], prompts: int = 1) -> dict[str, int]:
    prompt = sum(c.prompt_tokens for c in choices) // max(1, len(choices) // prompts)
    completion = sum(c.completion_tokens for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


def chat_stream(served: ServedModel, request: ChatRequest, response_id: str) -> Iterator[str]:
    """The server-sent events of a streamed chat completion, ending with `data: [DONE]`."""
    created, done = int(time.time()), []

    def chunk(index: int, delta: dict, finish: str | None = None) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
        }

    try:
        for index in range(request.n):
            choice = Choice()
            yield _sse(chunk(index, {"role": "assistant", "content": ""}))
            for piece in chat_pieces(served, request, index, choice):
                yield _sse(chunk(index, {"content": piece}))
            yield _sse(chunk(index, {}, choice.finish))
            done.append(choice)
        if (request.stream_options or {}).get("include_usage"):
            yield _sse({**chunk(0, {}), "choices": [], "usage": _usage(done)})
    except Exception as exc:  # headers are sent: the error goes into the stream, in OpenAI's shape
        yield _sse(_failure(exc).body())
    yield _sse("[DONE]")


def _failure(exc: Exception) -> OpenAIError:
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, chat.ChatError | ValueError):
        return OpenAIError(400, str(exc))
    return OpenAIError(500, f"{type(exc).__name__}: {exc}")


def add_routes(app: FastAPI) -> None:
    """The /v1 routes on the server's app."""

    @app.exception_handler(OpenAIError)
    async def openai_error(_: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.get("/v1/models")
    async def list_models():
        served = await asyncio.to_thread(served_models)
        return {
            "object": "list",
            "data": [{"id": m.id, "object": "model", "created": m.created, "owned_by": OWNER} for m in served],
        }

    @app.get("/v1/models/{model:path}")
    async def get_model(model: str):
        served = await asyncio.to_thread(find_model, model)
        return {"id": served.id, "object": "model", "created": served.created, "owned_by": OWNER}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = _parse(ChatRequest, await _json_body(request))
        _refuse_unsupported(body)
        for message in body.messages:
            _text_of(message)  # content parts that are not text: refused before anything is sampled
        body.stops()
        served = await asyncio.to_thread(find_model, body.model)
        response_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if body.stream:
            return StreamingResponse(chat_stream(served, body, response_id), media_type="text/event-stream")
        choices = await _answered(_chat_choices, served, body)
        return {
            "id": response_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish,
                    "logprobs": None,
                }
                for i, c in enumerate(choices)
            ],
            "usage": _usage(choices),
        }

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = _parse(CompletionRequest, await _json_body(request))
        _refuse_unsupported(body)
        body.stops()
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if not prompts:
            raise OpenAIError(400, "prompt: give a string or a non-empty list of strings", "prompt")
        served = await asyncio.to_thread(find_model, body.model)
        choices = await _answered(
            lambda: [complete(served, body, prompt, i) for prompt in prompts for i in range(body.n)]
        )
        response_id, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        rows = [
            {"index": i, "text": c.text, "finish_reason": c.finish, "logprobs": None} for i, c in enumerate(choices)
        ]
        if body.stream:
            events = [
                _sse(
                    {
                        "id": response_id,
                        "object": "text_completion",
                        "created": created,
                        "model": body.model,
                        "choices": [row],
                    }
                )
                for row in rows
            ]
            if (body.stream_options or {}).get("include_usage"):
                events.append(
                    _sse(
                        {
                            "id": response_id,
                            "object": "text_completion",
                            "created": created,
                            "model": body.model,
                            "choices": [],
                            "usage": _usage(choices, len(prompts)),
                        }
                    )
                )
            return StreamingResponse(iter([*events, _sse("[DONE]")]), media_type="text/event-stream")
        return {
            "id": response_id,
            "object": "text_completion",
            "created": created,
            "model": body.model,
            "choices": rows,
            "usage": _usage(choices, len(prompts)),
        }

    @app.api_route("/v1/{rest:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def not_served(rest: str):
        raise OpenAIError(
            404,
            f"cookbook serve does not implement /v1/{rest}; it answers /v1/models, /v1/chat/completions and "
            "/v1/completions",
            code="unknown_url",
        )


def _chat_choices(served: ServedModel, request: ChatRequest) -> list[Choice]:
    choices = []
    for index in range(request.n):
        choice = Choice()
        for _ in chat_pieces(served, request, index, choice):
            pass
        choices.append(choice)
    return choices


async def _answered(work, *args):
    """`work(*args)` on a thread; its errors as OpenAI errors (a bad checkpoint 400, anything else 500)."""
    try:
        return await asyncio.to_thread(work, *args)
    except Exception as exc:
        raise _failure(exc) from exc


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise OpenAIError(400, "the request body is not JSON") from None
