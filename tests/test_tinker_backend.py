"""The hosted Tinker backend, tested without network: the probe's three failure reasons (in the engine and in the
CLI) against a closed port and a local HTTP server that plays the service; the real SL loop end to end through the
adapter on a recording fake of the SDK's client objects (checkpoints stored as tinker:// paths, resume through
create_training_client_from_state_with_optimizer); every SDK method and keyword the adapter uses checked against
the installed `tinker` package's signatures; and the key never written anywhere."""

from __future__ import annotations

import concurrent.futures
import inspect
import itertools
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest
import tinker
from tinker import types
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

from cookbook_engine import cli, config as cfg, models, secrets
from cookbook_engine.backends import service_client, tinker as hosted
from cookbook_engine.runs import RunManager
from cookbook_engine.training.common import start_training_client
from storage import Store, stop_owner

GOOD_KEY = "tml-good-key-0123456789abcdef"
OFFERED = [models.DEFAULT_MODEL, "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B"]


# --- a local HTTP server that plays the service's capabilities endpoint ------------------------------------------
class FakeServiceHandler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path != hosted.CAPABILITIES_PATH:
            self.send_response(404)
            self.end_headers()
            return
        if self.headers.get(hosted.AUTH_HEADER) != GOOD_KEY:
            body, status = b'{"detail": "invalid api key"}', 401
        else:
            body, status = json.dumps({"supported_models": [{"model_name": m} for m in OFFERED]}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeServiceHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def clean_key_state(monkeypatch):
    """No key from this machine's environment, no session key or cached probe left over from another test."""
    for name in ("TINKER_API_KEY", "TINKER_BASE_URL", "TINKER_CREDENTIAL_CMD"):
        monkeypatch.delenv(name, raising=False)
    secrets.clear_session_key()
    hosted.forget_probe()
    yield
    secrets.clear_session_key()
    hosted.forget_probe()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- a recording fake of the SDK's client objects -------------------------------------------------------------
class Recorder:
    def __init__(self):
        self.calls: list[tuple[str, str, tuple, dict]] = []

    def record(self, sdk_class: str, method: str, args: tuple, kwargs: dict) -> None:
        self.calls.append((sdk_class, method, args, dict(kwargs)))

    def methods(self, sdk_class: str | None = None) -> list[str]:
        return [m for c, m, _, _ in self.calls if sdk_class in (None, c)]

    def kwargs_of(self, method: str) -> list[dict]:
        return [kw for _, m, _, kw in self.calls if m == method]


def done(value) -> AwaitableConcurrentFuture:
    """A finished future of the SDK's own APIFuture type (awaitable, with .result())."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return AwaitableConcurrentFuture(future)


class FakeServiceClient:
    """Stands in for tinker.ServiceClient: records every call and answers with real tinker.types objects."""

    _runs = itertools.count(1)

    def __init__(self, recorder: Recorder, *args, **kwargs):
        self.recorder = recorder
        recorder.record("ServiceClient", "__init__", args, kwargs)

    def _training_client(self, base_model: str) -> FakeTrainingClient:
        return FakeTrainingClient(self.recorder, base_model, f"run-{next(self._runs)}:train:0")

    def create_lora_training_client(self, *args, **kwargs):
        self.recorder.record("ServiceClient", "create_lora_training_client", args, kwargs)
        return done(self._training_client(kwargs["base_model"]))

    def create_training_client_from_state(self, *args, **kwargs):
        self.recorder.record("ServiceClient", "create_training_client_from_state", args, kwargs)
        return done(self._training_client(models.DEFAULT_MODEL))

    def create_training_client_from_state_with_optimizer(self, *args, **kwargs):
        self.recorder.record("ServiceClient", "create_training_client_from_state_with_optimizer", args, kwargs)
        return done(self._training_client(models.DEFAULT_MODEL))

    def create_sampling_client(self, *args, **kwargs):
        self.recorder.record("ServiceClient", "create_sampling_client", args, kwargs)
        return done(FakeSamplingClient(self.recorder, kwargs.get("base_model") or models.DEFAULT_MODEL))


class FakeTrainingClient:
    def __init__(self, recorder: Recorder, base_model: str, model_id: str):
        self.recorder, self.base_model, self.model_id = recorder, base_model, model_id

    def _record(self, method, args, kwargs):
        self.recorder.record("TrainingClient", method, args, kwargs)

    @staticmethod
    def _output(data: list[types.Datum]) -> types.ForwardBackwardOutput:
        outputs = [{"logprobs": types.TensorData(data=[-0.5] * d.model_input.length, dtype="float32")} for d in data]
        return types.ForwardBackwardOutput(
            loss_fn_output_type="cross_entropy",
            loss_fn_outputs=outputs,
            metrics={"loss:sum": 0.5 * sum(d.model_input.length for d in data)},
        )

    def forward(self, *args, **kwargs):
        self._record("forward", args, kwargs)
        return done(self._output(kwargs["data"]))

    def forward_backward(self, *args, **kwargs):
        self._record("forward_backward", args, kwargs)
        return done(self._output(kwargs["data"]))

    def forward_backward_custom(self, *args, **kwargs):
        self._record("forward_backward_custom", args, kwargs)
        import torch

        data = kwargs["data"]
        logprobs = [torch.full((d.model_input.length,), -0.5, requires_grad=True) for d in data]
        loss, metrics = kwargs["loss_fn"](data, logprobs)
        loss.backward()
        return done(
            types.ForwardBackwardOutput(
                loss_fn_output_type="custom", loss_fn_outputs=[], metrics={k: float(v) for k, v in metrics.items()}
            )
        )

    def optim_step(self, *args, **kwargs):
        self._record("optim_step", args, kwargs)
        return done(types.OptimStepResponse(metrics={"grad_norm": 1.0}))

    def save_state(self, *args, **kwargs):
        self._record("save_state", args, kwargs)
        return done(types.SaveWeightsResponse(path=f"tinker://{self.model_id}/weights/{kwargs['name']}"))

    def save_weights_for_sampler(self, *args, **kwargs):
        self._record("save_weights_for_sampler", args, kwargs)
        return done(
            types.SaveWeightsForSamplerResponse(path=f"tinker://{self.model_id}/sampler_weights/{kwargs['name']}")
        )

    def save_weights_and_get_sampling_client(self, *args, **kwargs):
        self._record("save_weights_and_get_sampling_client", args, kwargs)
        return done(FakeSamplingClient(self.recorder, self.base_model))

    def load_state(self, *args, **kwargs):
        self._record("load_state", args, kwargs)
        return done(types.LoadWeightsResponse(path=kwargs["path"]))

    def load_state_with_optimizer(self, *args, **kwargs):
        self._record("load_state_with_optimizer", args, kwargs)
        return done(types.LoadWeightsResponse(path=kwargs["path"]))

    def get_info(self, *args, **kwargs):
        self._record("get_info", args, kwargs)
        return types.GetInfoResponse(
            model_id=self.model_id,
            model_data={"model_name": self.base_model},
            is_lora=True,
            lora_rank=4,
            model_name=self.base_model,
        )


class FakeSamplingClient:
    def __init__(self, recorder: Recorder, base_model: str):
        self.recorder, self.base_model = recorder, base_model

    def sample(self, *args, **kwargs):
        self.recorder.record("SamplingClient", "sample", args, kwargs)
        sequences = [
            types.SampledSequence(
                stop_reason="stop", sequence_id=str(i), _tokens_list=[5, 6, 2], _logprobs_list=[-0.1, -0.2, -0.3]
            )
            for i in range(kwargs["num_samples"])
        ]
        return done(types.SampleResponse(sequences=sequences))

    def compute_logprobs(self, *args, **kwargs):
        self.recorder.record("SamplingClient", "compute_logprobs", args, kwargs)
        return done([None] + [-1.0] * (kwargs["prompt"].length - 1))

    def get_base_model(self, *args, **kwargs):
        self.recorder.record("SamplingClient", "get_base_model", args, kwargs)
        return self.base_model


@pytest.fixture
def recorder(monkeypatch, fake_service):
    """The adapter wired to the recording fake, behind a local service that accepts GOOD_KEY."""
    recording = Recorder()
    monkeypatch.setenv("TINKER_BASE_URL", fake_service)
    monkeypatch.setattr(hosted, "CLIENT_FACTORY", lambda *a, **kw: FakeServiceClient(recording, *a, **kw))
    return recording


def datum(n: int = 6) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(range(1, n + 1))),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=list(range(2, n + 2)), dtype="int64"),
            "weights": types.TensorData(data=[1.0] * n, dtype="float32"),
        },
    )


# --- the probe -----------------------------------------------------------------------------------------------
def test_no_key_is_reported_at_once_and_no_sdk_client_is_built(monkeypatch):
    built = []
    monkeypatch.setattr(hosted, "CLIENT_FACTORY", lambda **kw: built.append(kw))
    started = time.perf_counter()
    result = hosted.probe()
    assert not result.ok and result.reason == "missing_key"
    assert "TINKER_API_KEY" in result.message
    assert time.perf_counter() - started < 0.5
    with pytest.raises(hosted.TinkerUnavailable) as caught:
        service_client("tinker")
    assert caught.value.reason == "missing_key" and isinstance(caught.value, ValueError)
    assert built == []


def test_an_unreachable_service_is_reported_within_seconds(monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", GOOD_KEY)
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("TINKER_BASE_URL", url)
    started = time.perf_counter()
    result = hosted.probe()
    assert time.perf_counter() - started < 5
    assert not result.ok and result.reason == "unreachable"
    assert url in result.message and "TINKER_BASE_URL" in result.message
    with pytest.raises(hosted.TinkerUnavailable) as caught:
        hosted.hosted_service_client(client_factory=lambda **kw: pytest.fail("SDK client built before the probe"))
    assert caught.value.reason == "unreachable"


def test_a_service_that_never_answers_is_reported_at_the_deadline(monkeypatch):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections are accepted by the kernel, and then nothing ever answers
    try:
        monkeypatch.setenv("TINKER_API_KEY", GOOD_KEY)
        monkeypatch.setenv("TINKER_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.perf_counter()
        result = hosted.probe(timeout_s=1.0)
        assert time.perf_counter() - started < 2.5
        assert result.reason == "unreachable" and "within 1 s" in result.message
    finally:
        silent.close()


def test_a_rejected_key_is_reported_as_bad_key(monkeypatch, fake_service):
    monkeypatch.setenv("TINKER_BASE_URL", fake_service)
    monkeypatch.setenv("TINKER_API_KEY", "tml-wrong-key-999999999999")
    result = hosted.probe()
    assert not result.ok and result.reason == "bad_key" and "HTTP 401" in result.message
    assert "tml-wrong-key-999999999999" not in result.message


def test_a_key_of_the_wrong_form_is_bad_without_asking_the_service(monkeypatch):
    monkeypatch.setenv("TINKER_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("TINKER_API_KEY", "sk-not-a-tinker-key")
    result = hosted.probe()
    assert result.reason == "bad_key" and "tml-" in result.message


def test_a_good_key_lists_the_models_and_a_session_key_overrides_the_environment(monkeypatch, fake_service):
    monkeypatch.setenv("TINKER_BASE_URL", fake_service)
    monkeypatch.setenv("TINKER_API_KEY", "tml-wrong-key-999999999999")
    secrets.set_session_key(GOOD_KEY)
    result = hosted.probe()
    assert result.ok and result.reason == "ok" and result.models == OFFERED
    assert hosted.list_models() == OFFERED
    assert secrets.key_source() == "session"


def test_each_failure_has_its_own_message_in_the_cli(monkeypatch, fake_service, capsys):
    def cli_error() -> str:
        hosted.forget_probe()
        started = time.perf_counter()
        assert cli.main(["sl", "backend=tinker", "--dry-run"]) == cli.EXIT_BAD_INPUT
        assert time.perf_counter() - started < 5
        return capsys.readouterr().err

    missing = cli_error()
    monkeypatch.setenv("TINKER_API_KEY", "tml-wrong-key-999999999999")
    monkeypatch.setenv("TINKER_BASE_URL", fake_service)
    rejected = cli_error()
    monkeypatch.setenv("TINKER_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    unreachable = cli_error()
    assert "No Tinker API key" in missing
    assert "rejected the API key" in rejected and "tml-wrong-key" not in rejected
    assert "Cannot reach the Tinker service" in unreachable
    assert len({missing, rejected, unreachable}) == 3


def test_a_model_the_service_does_not_offer_is_refused_before_a_run(monkeypatch, fake_service, capsys):
    monkeypatch.setenv("TINKER_BASE_URL", fake_service)
    monkeypatch.setenv("TINKER_API_KEY", GOOD_KEY)
    assert cli.main(["sl", "backend=tinker", "model=acme/NotHosted-7B", "--dry-run"]) == cli.EXIT_BAD_INPUT
    assert "does not offer it" in capsys.readouterr().err


# --- the adapter over the recording fake ------------------------------------------------------------------------
def all_files_text(folder: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def database_export_text(db_file: Path, into: Path) -> str:
    """Every table of the studio's DuckDB file exported to CSV, as one text (DuckDB compresses its own file)."""
    stop_owner(db_file)  # the owner holds the file: let this test open it itself
    with duckdb.connect(str(db_file), read_only=True) as connection:
        connection.execute(f"EXPORT DATABASE '{into}' (FORMAT csv)")
    return all_files_text(into)


def test_sl_runs_end_to_end_through_the_sdk_and_stores_tinker_paths(home, default_model_ready, recorder, tmp_path):
    secrets.set_session_key(GOOD_KEY)  # entered in the studio: this process only
    config = cfg.SLConfig(
        backend="tinker",
        max_steps=4,
        batch_size=2,
        max_length=128,
        save_every=2,
        eval_every=2,
        lora_rank=8,
        learning_rate=2e-4,
    )
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=120)
    assert run["status"] == "completed", run.get("traceback")

    init = recorder.kwargs_of("__init__")[0]
    assert init["api_key"] == GOOD_KEY and init["base_url"].startswith("http://127.0.0.1:")
    created = recorder.kwargs_of("create_lora_training_client")[0]
    assert created["base_model"] == models.DEFAULT_MODEL and created["rank"] == 8 and created["seed"] == 0
    training = [m for m in recorder.methods("TrainingClient") if m in ("forward_backward", "optim_step")]
    assert training == ["forward_backward", "optim_step"] * 4
    assert [kw["optim_params"].learning_rate for kw in recorder.kwargs_of("optim_step")][0] == pytest.approx(2e-4)
    assert "forward" in recorder.methods("TrainingClient")  # the held-out NLL

    store = Store.default()
    checkpoints = store.list_checkpoints(run_id)
    assert sorted(c["step"] for c in checkpoints) == [2, 4]
    assert all(
        c["state_path"].startswith("tinker://") and c["sampler_path"].startswith("tinker://") for c in checkpoints
    )
    lines = [json.loads(line) for line in (Path(run["log_dir"]) / "checkpoints.jsonl").read_text().splitlines()]
    assert [line["state_path"].rsplit("/", 1)[1] for line in lines] == ["000002", "final"]
    assert {line["state_path"] for line in lines} == {c["state_path"] for c in checkpoints}
    nll = store.get_metrics_wide(run_id)["train_mean_nll"].dropna().tolist()
    assert nll == pytest.approx([0.5] * 4)  # the fake's log-probs, through the loop's own arithmetic

    # The key was used, and is nowhere the studio writes: the run folder, the home folder, the database.
    written, exported = all_files_text(home), database_export_text(home / "studio.duckdb", tmp_path / "export")
    assert run_id in written and run_id in exported  # the texts searched do hold the run
    assert GOOD_KEY not in written and GOOD_KEY not in exported
    assert GOOD_KEY not in cfg.to_command(config) and GOOD_KEY not in cfg.dumps(config)


def test_train_attn_and_train_mlp_reach_the_sdks_create_lora_training_client(recorder):
    secrets.set_session_key(GOOD_KEY)
    start_training_client(cfg.SLConfig(backend="tinker", lora_rank=8, train_mlp=False), None)
    start_training_client(cfg.SLConfig(backend="tinker", lora_rank=8), None)
    # RL's train_mlp=auto is attention only for the local default model alone: a hosted model keeps the MLP
    start_training_client(cfg.RLConfig(backend="tinker", model="Qwen/Qwen3-8B", lora_rank=8), None)
    created = recorder.kwargs_of("create_lora_training_client")
    assert [(kw["train_attn"], kw["train_mlp"]) for kw in created] == [(True, False), (True, True), (True, True)]


def test_resume_goes_through_create_training_client_from_state_with_optimizer(recorder):
    secrets.set_session_key(GOOD_KEY)
    config = cfg.SLConfig(backend="tinker")
    resume = {"state_path": "tinker://run-7:train:0/weights/000010", "step": 10, "loop_state": {"batch": 10}}
    _, client, first_step = start_training_client(config, resume)
    assert first_step == 10
    assert recorder.kwargs_of("create_training_client_from_state_with_optimizer") == [
        {
            "path": "tinker://run-7:train:0/weights/000010",
            "base_model": None,
            "user_metadata": None,
            "weights_access_token": None,
        }
    ]
    assert client.get_info().model_data.model_name == models.DEFAULT_MODEL


def exercise_every_adapter_method(recorder) -> None:
    """Every method of the hosted adapter, sync and async, so the recorder sees every SDK call it makes."""
    import asyncio

    secrets.set_session_key(GOOD_KEY)
    service = hosted.hosted_service_client()
    client = service.create_lora_training_client(
        models.DEFAULT_MODEL, rank=4, seed=1, user_metadata={"a": "b"}
    ).result()
    params = types.SamplingParams(max_tokens=3, temperature=0.7)
    prompt = types.ModelInput.from_ints([1, 2, 3])

    def custom_loss(data, logprobs_list):
        loss = -sum(lp.sum() for lp in logprobs_list)
        return loss, {"custom:sum": loss.detach()}

    client.forward([datum()], "cross_entropy").result()
    client.forward_backward([datum()], "ppo", {"clip_low_threshold": 0.8}).result()
    client.forward_backward_custom([datum()], custom_loss).result()
    client.optim_step(types.AdamParams(learning_rate=1e-4)).result()
    assert client.save_state("s1").result().path.startswith("tinker://")
    assert client.save_weights_for_sampler("w1").result().path.startswith("tinker://")
    client.load_state("tinker://x/weights/s1").result()
    client.load_state_with_optimizer("tinker://x/weights/s1").result()
    named = client.save_weights_and_get_sampling_client("w2").result()
    assert named.model_path.endswith("/sampler_weights/w2")
    ephemeral = client.save_weights_and_get_sampling_client().result()
    assert ephemeral.sample(prompt, 2, params).result().sequences[0].tokens == [5, 6, 2]
    assert named.compute_logprobs(prompt).result()[0] is None
    assert named.get_base_model() == models.DEFAULT_MODEL
    service.create_sampling_client(base_model=models.DEFAULT_MODEL)
    service.create_training_client_from_state("tinker://x/weights/s1")
    service.create_training_client_from_state_with_optimizer("tinker://x/weights/s1")
    assert client.model_id.startswith("run-")

    async def asynchronous():
        other = await service.create_lora_training_client_async(models.DEFAULT_MODEL, rank=4)
        await (await other.forward_async([datum()]))
        await (await other.forward_backward_async([datum()]))
        await (await other.optim_step_async(types.AdamParams(learning_rate=1e-4)))
        await (await other.save_state_async("s2"))
        await (await other.save_weights_for_sampler_async("w3"))
        sampler = await other.save_weights_and_get_sampling_client_async("w4")
        await sampler.sample_async(prompt, 1, params)
        await sampler.compute_logprobs_async(prompt)
        await service.create_sampling_client_async(model_path="tinker://x/sampler_weights/w4")
        await service.create_training_client_from_state_with_optimizer_async("tinker://x/weights/s2")

    asyncio.run(asynchronous())


# Every SDK method the adapter calls, by class. The test below fails if the adapter calls another one (add it
# here after checking the SDK) or stops calling one of these.
SDK_CALLS = {
    "ServiceClient": {
        "__init__",
        "create_lora_training_client",
        "create_training_client_from_state",
        "create_training_client_from_state_with_optimizer",
        "create_sampling_client",
    },
    "TrainingClient": {
        "forward",
        "forward_backward",
        "forward_backward_custom",
        "optim_step",
        "save_state",
        "save_weights_for_sampler",
        "save_weights_and_get_sampling_client",
        "load_state",
        "load_state_with_optimizer",
        "get_info",
    },
    "SamplingClient": {"sample", "compute_logprobs", "get_base_model"},
}


def test_every_sdk_method_and_keyword_the_adapter_uses_exists_in_the_installed_sdk(recorder):
    exercise_every_adapter_method(recorder)
    sdk_classes = {
        "ServiceClient": tinker.ServiceClient,
        "TrainingClient": tinker.TrainingClient,
        "SamplingClient": tinker.SamplingClient,
    }
    used = {name: set() for name in sdk_classes}
    for sdk_class, method, args, kwargs in recorder.calls:
        used[sdk_class].add(method)
        assert args == (), f"{sdk_class}.{method}: the adapter passes arguments by position; pass them by name"
        signature = inspect.signature(getattr(sdk_classes[sdk_class], method))
        try:
            signature.bind(None, **kwargs)  # None for self
        except TypeError as exc:
            pytest.fail(
                f"tinker {tinker.__version__} {sdk_class}.{method}{signature} does not accept {sorted(kwargs)}: {exc}"
            )
    assert used == SDK_CALLS


def test_training_client_futures_are_awaitable_apifutures(recorder):
    import asyncio

    secrets.set_session_key(GOOD_KEY)
    client = service_client("tinker").create_lora_training_client(models.DEFAULT_MODEL).result()
    future = client.forward_backward([datum()], "cross_entropy")
    assert isinstance(future, tinker.APIFuture)
    assert asyncio.run(future.result_async()).metrics["loss:sum"] == pytest.approx(3.0)


def test_a_model_the_service_does_not_offer_is_refused_by_the_adapter(recorder):
    secrets.set_session_key(GOOD_KEY)
    service = hosted.hosted_service_client()
    with pytest.raises(models.ModelError, match="does not offer"):
        service.create_lora_training_client("acme/NotHosted-7B")
    assert "create_lora_training_client" not in recorder.methods()


# --- learning rates ----------------------------------------------------------------------------------------------
def test_suggested_learning_rates_follow_the_cookbook_formula():
    assert hosted.suggested_learning_rate("meta-llama/Llama-3.1-8B") == pytest.approx(5e-4 * (2000 / 4096) ** 0.781)
    assert hosted.suggested_learning_rate("Qwen/Qwen3-8B") == pytest.approx(5e-4 * (2000 / 4096) ** 0.0775)
    assert hosted.suggested_learning_rate("acme/Unknown-3B") == hosted.FALLBACK_LEARNING_RATE
    assert hosted.suggested_learning_rate("default") == 1e-3


# --- the key never leaves this process ------------------------------------------------------------------------
def test_the_key_is_never_written_by_a_run(home, default_model_ready, monkeypatch, tmp_path):
    key = "sk-test-secret-123"
    monkeypatch.setenv("TINKER_API_KEY", key)
    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n"
            for q, a in [("Hi", "Hello."), ("Bye", "Goodbye."), ("Yes?", "Yes."), ("No?", "No.")]
        )
    )
    config = cfg.SLConfig(
        dataset=str(dataset),
        max_steps=2,
        batch_size=2,
        max_length=64,
        lora_rank=4,
        learning_rate=1e-4,
        test_fraction=0.0,
        save_every=1,
    )
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=300)
    assert run["status"] == "completed", run.get("traceback")
    assert (Path(run["log_dir"]) / "log.txt").exists()
    written, exported = all_files_text(home), database_export_text(home / "studio.duckdb", tmp_path / "export")
    assert run_id in written and run_id in exported  # the texts searched do hold the run
    assert key not in written and key not in exported
    assert key not in json.dumps(Store.default().get_run(run_id), default=str)
    assert key not in cfg.to_command(config) and key not in cfg.dumps(config)
    assert not [f for kind in cfg.CONFIG_TYPES.values() for f in cfg.field_names(kind) if "key" in f]


def test_redact_replaces_every_known_secret(monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-env-key-abcdef123456")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token_value")
    secrets.set_session_key("tml-session-key-987654321")
    text = "env tml-env-key-abcdef123456, hf hf_secret_token_value, session tml-session-key-987654321."
    assert secrets.redact(text) == "env ***, hf ***, session ***."
    assert secrets.redact_obj({"a": [text], "n": 3}) == {"a": ["env ***, hf ***, session ***."], "n": 3}
    assert secrets.masked("tml-session-key-987654321") == "tml-***4321"
    secrets.set_session_key("  ")
    assert secrets.key_source() == "environment"
