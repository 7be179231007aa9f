"""`cookbook serve` with the real tinker SDK over HTTP. Fast: the protobuf wire format round-trips through the SDK's
own encoder and decoders; the unmodified SDK connects with any tml- key (no JWT exchange), sees the default model,
and `serve.status()` reports the server; unknown endpoints and ids answer 404 with a reason. Slow: tinker-cookbook's
recipes/sl_loop.py and rl_loop.py run unmodified through `tinker.ServiceClient` with TINKER_BASE_URL pointing at the
server (hub downloads replaced as in test_tinker_recipes.py): the SL loss falls, checkpoints come back as tinker://
paths, and each session is a studio run in DuckDB with its metrics, checkpoints and sampled transcripts."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import tinker
from tinker import types
from tinker.proto import request_conv, response_conv

from cookbook_engine import models, serve
from cookbook_engine.serve import wire
from cookbook_engine.serve.app import create_app
from cookbook_engine.serve.state import ServerState

try:  # the recipes' fixture and helpers (hub downloads replaced by local data), shared with the in-process tests
    from test_tinker_recipes import metrics_by_step, recipe_fixture, run_math_rl, sl_config  # noqa: F401
except pytest.skip.Exception:  # tinker-cookbook is not installed: the fast tests here still run

    @pytest.fixture
    def recipe_fixture():
        pytest.skip("tinker-cookbook is not installed (scripts/setup.sh installs it)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(monkeypatch, tmp_path):
    """The server on a free port in this process, the SDK pointed at it through the environment."""
    import uvicorn

    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    port = free_port()
    state = ServerState(record=True)
    uv = uvicorn.Server(uvicorn.Config(create_app(state), host=serve.HOST, port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, name="test-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "the server did not start within 30 s"
    url = f"http://{serve.HOST}:{port}"
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / serve.STATUS_FILE).write_text(json.dumps({"url": url, "pid": 1}))
    monkeypatch.setenv("TINKER_BASE_URL", url)
    monkeypatch.setenv("TINKER_API_KEY", serve.LOCAL_API_KEY)
    yield url, state
    uv.should_exit = True
    thread.join(15)
    state.finish_all()
    if hasattr(state._store, "close"):
        state._store.close()


# --- the wire format, against the SDK's own codecs ----------------------------------------------------------
def test_forward_backward_requests_decode_what_the_sdk_encodes():
    spans = [
        types.PromptProvenanceSpan(sequence_id="s-1", offset=1, length=2),
        types.SampledProvenanceSpan(sequence_id="s-1", length=1),
    ]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7]),
        loss_fn_inputs={"target_tokens": [6, 7, 8], "weights": [0.0, 1.0, 0.5]},
    ).with_provenance(model_input=spans, loss_fn_inputs=spans)
    request = types.ForwardBackwardRequest(
        model_id="s:train:0",
        seq_id=3,
        forward_backward_input=types.ForwardBackwardInput(
            data=[datum], loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.7}
        ),
    )
    proto = request_conv.forward_backward_request_to_proto(request)
    proto.forward_only = True
    model_id, loss_fn, config, data, forward_only = wire.parse_forward_backward(proto.SerializeToString())
    assert (model_id, loss_fn, config, forward_only) == ("s:train:0", "ppo", {"clip_low_threshold": 0.7}, True)
    assert data[0].model_input.to_ints() == [5, 6, 7]
    assert data[0].loss_fn_inputs["target_tokens"].tolist() == [6, 7, 8]
    assert data[0].loss_fn_inputs["weights"].tolist() == [0.0, 1.0, 0.5]
    assert data[0].model_input_spans == spans and data[0].loss_fn_input_spans == spans  # stable_reinforce's provenance


def test_results_encode_to_what_the_sdk_decodes():
    output = types.ForwardBackwardOutput(
        loss_fn_output_type="TorchLossReturn",
        metrics={"loss:sum": 2.5},
        loss_fn_outputs=[
            {"logprobs": types.TensorData(data=[-1.0, -2.0], dtype="float32")},
            {"logprobs": types.TensorData(data=[-0.5], dtype="float32")},
        ],
    )
    decoded = response_conv.deserialize_forward_backward_output(wire.forward_backward_output(output))
    assert decoded.metrics == {"loss:sum": 2.5}
    assert [o["logprobs"].tolist() for o in decoded.loss_fn_outputs] == [[-1.0, -2.0], [-0.5]]
    response = types.SampleResponse(
        sequences=[
            types.SampledSequence(stop_reason="stop", sequence_id="a", _tokens_list=[4, 2], _logprobs_list=[-0.1, -0.2])
        ],
        _prompt_logprobs_list=[None, -3.0],
    )
    sampled = response_conv.deserialize_sample_response(wire.sample_response(response))
    assert sampled.sequences[0].tokens == [4, 2] and sampled.sequences[0].stop_reason == "stop"
    assert np.allclose(sampled.sequences[0].logprobs, [-0.1, -0.2])
    assert math.isnan(sampled.prompt_logprobs_np[0]) and sampled.prompt_logprobs_np[1] == -3.0


# --- the unmodified SDK against the server (no model needed) -----------------------------------------------
def test_the_sdk_connects_with_any_local_key_and_sees_the_default_model(server):
    url, state = server
    service = tinker.ServiceClient(display_name="probe")
    with pytest.warns(FutureWarning):  # deprecated in the SDK, but it opens the session
        capabilities = service.get_server_capabilities()
    assert [m.model_name for m in capabilities.supported_models] == [models.DEFAULT_MODEL]
    assert tinker.RestClient().get_server_capabilities().result() == capabilities
    session_id = service.holder.get_session_id()  # the SDK opens its session when its holder is first used
    assert state.session(session_id).display_name == "probe"
    config = httpx.post(f"{url}/api/v1/client/config", json={"sdk_version": tinker.__version__}).json()
    assert config["pjwt_auth_enabled"] is False
    status = serve.status()
    assert (
        status.running
        and status.url == url
        and status.env_line == (f"export TINKER_BASE_URL={url} TINKER_API_KEY={serve.LOCAL_API_KEY}")
    )


def test_unknown_endpoints_and_ids_answer_404_with_a_reason(server):
    url, _ = server
    missing = httpx.post(f"{url}/api/v1/save_weights_external", json={})
    assert missing.status_code == 404 and "does not implement" in missing.json()["detail"]
    unknown = httpx.post(f"{url}/api/v1/get_info", json={"model_id": "nope:train:0"})
    assert unknown.status_code == 404 and "unknown to this server" in unknown.json()["detail"]
    future = httpx.post(f"{url}/api/v1/retrieve_future", json={"request_id": "req-x"}).json()
    assert future["category"] == "user" and "unknown" in future["error"]


def test_status_says_not_running_without_a_server(home):
    assert serve.status() == serve.ServeStatus(False)


def test_sessions_whose_heartbeats_stop_expire_free_what_they_held_and_answer_410(home):
    """No heartbeat, request or poll for session_timeout_s: completed when no work was queued, interrupted (its work
    cancelled) when some was; a session that heartbeats, or polls for a result, stays; a late heartbeat answers 410."""
    import concurrent.futures

    from fastapi.testclient import TestClient

    from cookbook_engine.serve.state import SessionEnded

    state = ServerState(record=True, session_timeout_s=3600)
    quiet, busy, live, polling = (state.new_session(name, None) for name in ("quiet", "busy", "live", "polling"))
    for session in (quiet, busy, live, polling):
        state.start_run(session, models.DEFAULT_MODEL)
    queued: concurrent.futures.Future = concurrent.futures.Future()
    state.futures.add(queued, "forward_backward", session=busy)
    long_running = state.futures.add(concurrent.futures.Future(), "asample", session=polling).request_id
    state.session_timeout_s = 0.3
    deadline = time.monotonic() + 10
    while (quiet.session_id in state.sessions or busy.session_id in state.sessions) and time.monotonic() < deadline:
        state.session(live.session_id)  # what a heartbeat does
        state.future(long_running)  # what the SDK's poll for a result (retrieve_future) does
        time.sleep(0.05)
    state.session_timeout_s = 3600  # the live sessions stay while the test reads the store
    store = state._storage()
    assert store.get_run(quiet.run_id)["status"] == "completed"
    assert store.get_run(busy.run_id)["status"] == "interrupted" and queued.cancelled()
    assert live.session_id in state.sessions and store.get_run(live.run_id)["status"] == "running"
    assert polling.session_id in state.sessions  # a client waiting on its result is alive, heartbeat or not
    assert len(state.futures) == 1 and set(state.sessions) == {live.session_id, polling.session_id}
    with pytest.raises(SessionEnded, match="no heartbeat"):
        state.session(quiet.session_id)
    answer = TestClient(create_app(state)).post("/api/v1/session_heartbeat", json={"session_id": busy.session_id})
    assert answer.status_code == 410 and "with work queued" in answer.json()["detail"]
    state.finish_all()


# --- tinker-cookbook's recipes through the real SDK over HTTP ----------------------------------------------
@pytest.fixture
def over_http(server, recipe_fixture):
    return recipe_fixture, server[1]


def studio_run(state: ServerState) -> tuple[dict, object]:
    store = state._storage()
    runs = [r for r in store.list_runs() if (r.get("config") or {}).get("source") == "cookbook serve"]
    assert len(runs) == 1, runs
    return runs[0], store


@pytest.mark.slow
def test_sl_loop_runs_unmodified_through_the_sdk_over_http_and_is_a_studio_run(over_http, tmp_path):
    from tinker_cookbook.recipes import sl_loop

    model, state = over_http
    log_path = tmp_path / "sl-http"
    sl_loop.main(sl_config(model, log_path, max_steps=3, session_name="sl over http"))
    nll = [metrics_by_step(log_path)[step]["train_mean_nll"] for step in range(3)]
    assert nll[-1] < nll[0], nll
    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert all(c[k].startswith("tinker://") for c in checkpoints for k in ("state_path", "sampler_path") if k in c)
    run, store = studio_run(state)
    assert run["name"] == "sl over http" and run["kind"] == "sl"
    assert run["status"] == "running"  # the recipe never closes its ServiceClient: its session is still open
    logged = store.get_metrics(run["run_id"], ["train_mean_nll"]).sort_values("step")["value"].tolist()
    assert logged == pytest.approx(nll, rel=1e-4)  # the server's own per-step NLL matches the recipe's
    assert {c["kind"] for c in store.list_checkpoints(run["run_id"])} == {"state", "sampler"}
    state.finish_all()  # what stopping the server does
    assert store.get_run(run["run_id"])["status"] == "interrupted"


@pytest.mark.slow
def test_rl_loop_runs_unmodified_through_the_sdk_over_http_with_its_samples_recorded(over_http, tmp_path):
    import torch
    from tinker_cookbook.recipes import rl_loop

    model, state = over_http
    torch.manual_seed(0)
    rl_loop.main(
        rl_loop.Config(
            log_path=str(tmp_path / "rl-http"),
            model_name=model,
            batch_size=2,
            group_size=4,
            learning_rate=1e-4,
            lora_rank=4,
            save_every=0,
            max_tokens=24,
            loss_fn="cispo",
            max_steps=1,
            session_name="rl over http",
        )
    )
    assert sorted(metrics_by_step(tmp_path / "rl-http")) == [0]
    run, store = studio_run(state)
    transcripts = store.get_transcripts(run["run_id"])
    assert len(transcripts) == 2 * 4 and transcripts["completion"].str.len().gt(0).any()


@pytest.mark.slow
def test_math_rl_recipe_runs_with_its_defaults_stable_reinforce_over_http(over_http, tmp_path):
    model, state = over_http
    steps = run_math_rl(model, tmp_path / "math-rl-http")
    assert {0, 1} <= set(steps)  # two training steps (the recipe logs one more row at the end)
    run, store = studio_run(state)
    assert run["kind"] == "rl"


@pytest.mark.slow
def test_home_shows_whether_the_server_is_running_and_the_line_to_copy(server, default_model_ready):
    from streamlit.testing.v1 import AppTest

    main = str(Path(__file__).resolve().parent.parent / "app" / "main.py")
    at = AppTest.from_file(main, default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert serve.status().env_line in [code.value for code in at.code]
    (serve.paths.home() / serve.STATUS_FILE).unlink()  # as when the server stops
    at = AppTest.from_file(main, default_timeout=120).run()
    assert any("not running" in caption.value for caption in at.caption)


@pytest.mark.parametrize(
    ("options", "named"), [(["--dtype", "fp16"], "dtype='fp16'"), (["--device", "tpu"], "device='tpu'")]
)
def test_serve_refuses_an_unknown_device_or_dtype_by_name_before_listening(
    options, named, capsys, tmp_path, monkeypatch
):
    from cookbook_engine import cli
    from cookbook_engine.exit_codes import EXIT_BAD_INPUT

    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    assert cli.main(["serve", "--port", str(free_port()), *options]) == EXIT_BAD_INPUT
    said = capsys.readouterr().err
    assert named in said and "choose one of" in said, said
    assert not serve.status().running  # nothing started, no status file written


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])  # one of them differs from what auto picks on any CPU
def test_every_session_of_a_served_home_computes_in_the_dtype_serve_was_given(dtype, tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    state = ServerState(record=False, device="cpu", dtype=dtype)
    try:
        session = state.new_session("a session", None)
        expected = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        assert (session.service.compute.device, session.service.compute.dtype) == ("cpu", expected)
    finally:
        state.stop()
