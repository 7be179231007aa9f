"""The HTTP routes of `cookbook serve`: the endpoints the tinker SDK 0.38 calls, answered by the local backend.

Requests and responses are the SDK's own pydantic types (`tinker.types`) as JSON, except forward_backward requests
and ForwardBackwardOutput / SampleResponse results, which travel as the SDK's protobuf (wire.py). Work (create_model,
forward_backward, optim_step, save/load weights, asample) is queued on the model worker and answered with a future
id; `retrieve_future` holds each poll up to LONG_POLL_S for the result, then answers try_again. The server's client
config turns off the JWT exchange, so any API key the SDK accepts (`tml-...`) works. Checkpoint paths are tinker://
names of local checkpoint folders. REST: training runs and checkpoints (list, get, delete, ttl) through the local
REST client. Any other /api/v1 path answers 404 naming what is not implemented.

Every request passes guard.py first (Host, Origin, content type, size), and every name or path a route turns into a
folder is checked there (`guard.*`, `policy.*`): a hostile or malformed request gets a 4xx with a reason, never a 500.

Not here: sessions, futures and run recording (state.py), starting the server (serve/__init__.py), the request
checks (guard.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from tinker import types

from cookbook_engine import models
from cookbook_engine.backends import compat
from cookbook_engine.backends.protocol import map_future
from cookbook_engine.backends.rest import LocalRestClient
from cookbook_engine.serve import guard, openai_api, wire
from cookbook_engine.serve.state import ServerState, SessionEnded
from storage.statuses import SessionEnd

logger = logging.getLogger(__name__)

LONG_POLL_S = 10.0  # under the SDK's 45 s poll timeout; each try_again answer logs a warning in the SDK
CLIENT_CONFIG = types.ClientConfigResponse(
    pjwt_auth_enabled=False,
    parallel_fwdbwd_chunks=False,
    proto_compress_fwdbwd=False,
    use_pyqwest_transport=False,
    sample_use_retrieve_futures=False,
    custom_loss_server_side=False,
    sample_join_sampling_session=False,
)


def _json(model: Any) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json", exclude_none=True) if hasattr(model, "model_dump") else model)


def _observed(future: concurrent.futures.Future, observe) -> concurrent.futures.Future:
    """The same result, after `observe(result)` has recorded it (recording errors are state.py's to swallow)."""
    return map_future(future, lambda value: (observe(value), value)[1])


def _tinker_path(path: str) -> str:
    return path if path.startswith("tinker://") else compat.to_tinker_path(path) or path


def create_app(
    state: ServerState | None = None,
    *,
    max_request_bytes: int = guard.DEFAULT_MAX_REQUEST_MB << 20,
    allow_paths: tuple[str, ...] = (),
) -> FastAPI:
    """The app; `allow_paths`: folders outside the studio home that requests may name (cookbook serve --allow-path)."""
    state = state or ServerState()
    policy = guard.PathPolicy(allow_paths)
    app = FastAPI(title="cookbook serve", description="The tinker SDK's API, served by the local backend")
    app.state.server = state
    app.state.paths = policy
    app.add_middleware(guard.GuardMiddleware, max_request_bytes=max_request_bytes)

    @app.exception_handler(guard.Refused)
    async def refused(_: Request, exc: guard.Refused) -> JSONResponse:
        return guard.refusal(exc)

    @app.exception_handler(KeyError)
    async def unknown(_: Request, exc: KeyError) -> JSONResponse:
        return JSONResponse({"detail": str(exc.args[0] if exc.args else exc)}, status_code=404)

    @app.exception_handler(SessionEnded)
    async def ended(_: Request, exc: SessionEnded) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=410)  # Gone: the SDK stops heartbeating on 410

    @app.exception_handler(ValueError)
    async def bad(_: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    _service_routes(app, state)
    _training_routes(app, state, policy)
    _sampling_routes(app, state, policy)
    _future_routes(app, state)
    _rest_routes(app, state)
    openai_api.add_routes(app)  # /v1: the OpenAI-compatible endpoint over the base model and local checkpoints

    @app.api_route("/api/v1/{rest:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def not_implemented(rest: str) -> JSONResponse:
        return JSONResponse(
            {
                "detail": f"cookbook serve does not implement /api/v1/{rest} (a hosted-service "
                "feature the local backend does not offer)"
            },
            status_code=404,
        )

    return app


def _service_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/api/v1/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config():
        return _json(CLIENT_CONFIG)

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config():
        return {}

    @app.post("/api/v1/telemetry")
    async def telemetry():
        return {"status": "accepted"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities():
        return _json(
            types.GetServerCapabilitiesResponse(
                supported_models=[types.SupportedModel(model_name=models.DEFAULT_MODEL)]
            )
        )

    @app.post("/api/v1/create_session")
    async def create_session(request: Request):
        body = types.CreateSessionRequest.model_validate(await request.json())
        session = await asyncio.to_thread(state.new_session, body.display_name, body.user_metadata)
        return _json(types.CreateSessionResponse(session_id=session.session_id))

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        state.session(types.SessionHeartbeatRequest.model_validate(await request.json()).session_id)
        return _json(types.SessionHeartbeatResponse())

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request):
        reason = (await request.json()).get("reason") or {}
        end = reason.get("type", SessionEnd.SUCCESS) if isinstance(reason, dict) else None
        if end not in set(SessionEnd):
            raise guard.Refused(400, f"finish: reason.type {end!r} is not one of {', '.join(SessionEnd)}")
        await asyncio.to_thread(state.finish, session_id, end)
        return Response(status_code=200)


def _training_routes(app: FastAPI, state: ServerState, policy: guard.PathPolicy) -> None:
    @app.post("/api/v1/create_model")
    async def create_model(request: Request):
        body = types.CreateModelRequest.model_validate(await request.json())
        policy.base_model(body.base_model)
        session = state.session(body.session_id)
        lora = body.lora_config or types.LoraConfig(rank=32)
        future = session.service.create_lora_training_client(
            body.base_model,
            lora.rank,
            lora.seed,
            lora.train_mlp,
            lora.train_attn,
            lora.train_unembed,
            body.user_metadata,
        ).future()

        def created(client):
            return types.CreateModelResponse(model_id=state.add_model(session, body.model_seq_id, client))

        return _json(state.futures.add(map_future(future, created), "create_model", session=session))

    @app.post("/api/v1/get_info")
    async def get_info(request: Request):
        model_id = types.GetInfoRequest.model_validate(await request.json()).model_id
        _, client = state.model(model_id)
        return _json(client.get_info().model_copy(update={"model_id": model_id}))

    @app.post("/api/v1/weights_info")
    async def weights_info(request: Request):
        path = policy.checkpoint("weights_info", (await request.json()).get("tinker_path"))
        return _json(LocalRestClient().get_weights_info_by_tinker_path(path).result())

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request):
        model_id, loss_fn, config, data, forward_only = wire.parse_forward_backward(await request.body())
        session, client = state.model(model_id)
        if forward_only:
            state.on_forward(session, data)
            return _json(state.futures.add(client.forward(data, loss_fn, config).future(), "forward", session=session))
        future = _observed(
            client.forward_backward(data, loss_fn, config).future(),
            lambda output: state.on_forward_backward(session, loss_fn, data, output),
        )
        return _json(state.futures.add(future, "forward_backward", session=session))

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request):
        body = types.OptimStepRequest.model_validate(await request.json())
        session, client = state.model(body.model_id)
        future = _observed(
            client.optim_step(body.optim_params).future(), lambda response: state.on_optim_step(session, response)
        )
        return _json(state.futures.add(future, "optim_step", session=session))

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request):
        body = types.SaveWeightsRequest.model_validate(await request.json())
        if body.path is not None:
            guard.checkpoint_name("save_weights: checkpoint", body.path)
        session, client = state.model(body.model_id)
        name = body.path or f"state-{session.step:06d}"
        future = client.save_state(name, body.ttl_seconds, body.overwrite, body.user_metadata).future()

        def done(response):
            path = _tinker_path(response.path)
            state.on_checkpoint(session, name, "state", path)
            return types.SaveWeightsResponse(path=path)

        return _json(state.futures.add(map_future(future, done), "save_weights", session=session))

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request):
        body = types.SaveWeightsForSamplerRequest.model_validate(await request.json())
        if body.path is not None:
            guard.checkpoint_name("save_weights_for_sampler: checkpoint", body.path)
        session, client = state.model(body.model_id)
        if body.path:  # named, persistent sampler weights
            name = body.path
            future = client.save_weights_for_sampler(name, body.ttl_seconds, body.user_metadata).future()

            def saved(response):
                path = _tinker_path(response.path)
                state.on_checkpoint(session, name, "sampler", path)
                return types.SaveWeightsForSamplerResponseInternal(path=path)

            return _json(state.futures.add(map_future(future, saved), "save_weights_for_sampler", session=session))
        future = client.save_weights_and_get_sampling_client(kind=body.kind).future()

        def snapshot(sampler):  # unnamed: a sampling session on the weights as they are now
            return types.SaveWeightsForSamplerResponseInternal(sampling_session_id=state.add_sampler(session, sampler))

        return _json(state.futures.add(map_future(future, snapshot), "save_weights_for_sampler", session=session))

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request):
        body = types.LoadWeightsRequest.model_validate(await request.json())
        body = body.model_copy(update={"path": policy.checkpoint("load_weights", body.path)})  # SDK types are frozen
        policy.base_model(body.base_model)
        if body.model_id is None:  # a new training client from a checkpoint (create_training_client_from_state*)
            if body.session_id is None:
                raise ValueError("load_weights: a new training client needs the session_id it belongs to")
            session = state.session(body.session_id)
            create = (
                session.service.create_training_client_from_state_with_optimizer
                if body.optimizer
                else session.service.create_training_client_from_state
            )
            future = create(body.path, body.base_model, body.user_metadata, body.weights_access_token).future()

            def created(client):
                model_id = state.add_model(session, body.model_seq_id, client, parent=body.path)
                return types.LoadWeightsResponse(path=body.path, model_id=model_id)

            return _json(state.futures.add(map_future(future, created), "load_weights", session=session))
        session, client = state.model(body.model_id)
        call = client.load_state_with_optimizer if body.optimizer else client.load_state
        future = call(body.path, body.weights_access_token).future()
        return _json(state.futures.add(future, "load_weights", session=session))


def _sampling_routes(app: FastAPI, state: ServerState, policy: guard.PathPolicy) -> None:
    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request):
        body = types.CreateSamplingSessionRequest.model_validate(await request.json())
        if body.model_path is not None:
            body = body.model_copy(update={"model_path": policy.checkpoint("create_sampling_session", body.model_path)})
        policy.base_model(body.base_model)
        session = state.session(body.session_id)
        future = session.service.create_sampling_client(body.model_path, body.base_model)
        client = await asyncio.wrap_future(future.future())
        sampling_session_id = state.add_sampler(session, client)
        return _json(types.CreateSamplingSessionResponse(sampling_session_id=sampling_session_id))

    @app.get("/api/v1/samplers/{sampling_session_id}")
    async def get_sampler(sampling_session_id: str):
        _, client = state.sampler(sampling_session_id)
        return _json(
            types.GetSamplerResponse(
                sampler_id=sampling_session_id,
                base_model=client.get_base_model(),
                model_path=_tinker_path(client.model_path) if client.model_path else None,
            )
        )

    @app.post("/api/v1/asample")
    async def asample(request: Request):
        body = types.SampleRequest.model_validate(await request.json())
        if not body.sampling_session_id:
            raise ValueError("asample: cookbook serve samples through sampling sessions (sampling_session_id)")
        session, client = state.sampler(body.sampling_session_id)
        # The ids are fixed now: the SDK stamps them onto the sequences (the result does not repeat them), and the
        # sampling records stable_reinforce trains on are kept under them.
        sequence_ids = [f"{body.sampling_session_id}-{uuid.uuid4().hex[:12]}" for _ in range(body.num_samples)]
        future = client.sample_as(
            body.prompt,
            body.num_samples,
            body.sampling_params,
            bool(body.prompt_logprobs),
            body.prompt_logprobs_last_n,
            sequence_ids=sequence_ids,
            record_stability_info=bool(body.record_stability_info),
            topk_prompt_logprobs=body.topk_prompt_logprobs,
            topk_sample_logprobs=body.topk_sample_logprobs,
            target_prompt_logprobs=body.target_prompt_logprobs,
            prompt_alt_tokens_k=body.prompt_alt_tokens_k,
        ).future()
        future = _observed(
            future, lambda response: state.on_sample(session, client.get_tokenizer(), body.prompt, response)
        )
        return _json(state.futures.add(future, "asample", sequence_ids, session=session))


def _future_routes(app: FastAPI, state: ServerState) -> None:
    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        body = types.FutureRetrieveRequest.model_validate(await request.json())
        entry = state.future(body.request_id)
        if entry is None:
            return JSONResponse(
                {"error": f"future {body.request_id} is unknown to this server (was it restarted?)", "category": "user"}
            )
        future, _ = entry
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), LONG_POLL_S)
        except TimeoutError:
            return JSONResponse({"type": "try_again", "request_id": body.request_id, "queue_state": "active"})
        except Exception:  # the client gets the error from the future itself, below; the server's log keeps it too
            logger.exception("future %s failed", body.request_id)
        state.futures.forget(body.request_id)
        return _result(future, request.headers.get("accept", ""))

    @app.post("/api/v1/cancel_future")
    async def cancel_future(request: Request):
        entry = state.futures.get(str((await request.json()).get("request_id", "")))
        if entry is not None:
            entry[0].cancel()
        return {}


def _result(future: concurrent.futures.Future, accept: str) -> Response:
    error = future.exception() if not future.cancelled() else concurrent.futures.CancelledError("cancelled")
    if error is not None:
        category = (
            "user"
            if isinstance(
                error, (ValueError, TypeError, KeyError, NotImplementedError, FileNotFoundError, FileExistsError)
            )
            else "server"
        )
        return JSONResponse({"error": f"{type(error).__name__}: {error}", "category": category})
    value = future.result()
    if wire.PROTO_CONTENT_TYPE in accept and isinstance(value, types.ForwardBackwardOutput):
        return Response(wire.forward_backward_output(value), media_type=wire.PROTO_CONTENT_TYPE)
    if wire.PROTO_CONTENT_TYPE in accept and isinstance(value, types.SampleResponse):
        return Response(wire.sample_response(value), media_type=wire.PROTO_CONTENT_TYPE)
    return _json(value)


def _rest_routes(app: FastAPI, state: ServerState) -> None:
    """Training runs are named by the local training client's id (the run id inside tinker:// paths); the SDK's
    own model ids ("<session>:train:<n>") are accepted too."""
    rest = LocalRestClient()

    def local_id(run_id: str) -> str:
        run_id = guard.run_id(run_id)
        return state.models[run_id][1].model_id if run_id in state.models else run_id

    @app.get("/api/v1/training_runs")
    async def training_runs(limit: int = 20, offset: int = 0):
        return _json(rest.list_training_runs(limit, offset).result())

    @app.get("/api/v1/training_runs/{run_id}")
    async def training_run(run_id: str):
        return _json(rest.get_training_run(local_id(run_id)).result())

    @app.get("/api/v1/training_runs/{run_id}/checkpoints")
    async def checkpoints(run_id: str):
        return _json(rest.list_checkpoints(local_id(run_id)).result())

    @app.delete("/api/v1/training_runs/{run_id}/checkpoints/{kind}/{name}")
    async def delete_checkpoint(run_id: str, kind: str, name: str):
        kind, name = guard.checkpoint_kind(kind), guard.checkpoint_name("checkpoint", name)
        rest.delete_checkpoint(local_id(run_id), f"{kind}/{name}").result()
        return Response(status_code=200)

    @app.put("/api/v1/training_runs/{run_id}/checkpoints/{kind}/{name}/ttl")
    async def set_ttl(run_id: str, kind: str, name: str, request: Request):
        kind, name = guard.checkpoint_kind(kind), guard.checkpoint_name("checkpoint", name)
        ttl = (await request.json()).get("ttl_seconds")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 <= ttl <= 10**10):
            raise guard.Refused(400, f"ttl_seconds must be a whole number of seconds (0 to 1e10) or null, got {ttl!r}")
        rest.set_checkpoint_ttl_from_tinker_path(compat.tinker_path(local_id(run_id), kind, name), ttl).result()
        return Response(status_code=200)

    @app.get("/api/v1/checkpoints")
    async def user_checkpoints(limit: int = 100, offset: int = 0):
        return _json(rest.list_user_checkpoints(limit, offset).result())
