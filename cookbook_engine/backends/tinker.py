"""The hosted backend: the Tinker service through the official `tinker` SDK, behind the engine's client protocol.

Before any SDK client exists, `probe()` asks the service for its capabilities with one plain HTTP request (httpx)
under a hard deadline, because the SDK retries for minutes when the network is down. A missing key, a rejected key
and an unreachable service each give their own message within a few seconds (`TinkerUnavailable.reason` is
"missing_key", "bad_key" or "unreachable"); the CLI prints it and the studio shows it. After a good probe,
`hosted_service_client()` builds `tinker.ServiceClient(api_key=..., base_url=...)` and wraps it thinly: the SDK's
clients already speak our protocol's methods and `tinker.types`, so the wrappers only (1) wrap the clients inside
the SDK's futures of clients (create_* return futures, as the SDK's and the local backend's do; the `*_async`
variants return clients), (2) give the `*_async` methods our loops call without the SDK's deprecation warnings
(each made from its plain method by protocol.py's `async_returning` / `async_awaiting`), (3) keep named sampler
weights persistent (`save_weights_and_get_sampling_client(name)`), (4) check the base model against the service's
list. Each method takes the SDK's parameters and passes them on by name. Checkpoint paths are `tinker://...`
strings, stored like local paths; resuming goes through `create_training_client_from_state_with_optimizer`.

The key comes from `cookbook_engine.secrets` (environment or the studio's session) and is handed to the SDK only.
Not here: the training loops, anything about local models (backends/local.py), storage.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tinker import types
from tinker.lib.base_url import DEFAULT_BASE_URL, resolve_base_url

from cookbook_engine import models, secrets
from cookbook_engine.backends import protocol
from cookbook_engine.backends.protocol import ClientFuture, async_awaiting, async_returning, map_future
from storage.input_error import InputError

CAPABILITIES_PATH = "/api/v1/get_server_capabilities"  # the SDK's RestClient.get_server_capabilities endpoint
AUTH_HEADER = "X-API-Key"  # the SDK's ApiKeyAuthProvider sends the key in this header
KEY_PREFIXES = ("tml-", "eyJ")  # the SDK refuses other keys: API keys start with tml-, JWTs with eyJ
PROBE_TIMEOUT_S = 3.0
PROBE_CACHE_S = 10.0  # a probe's answer is reused this long (the studio reruns its pages often)
REASONS = ("missing_key", "bad_key", "unreachable")


class TinkerUnavailable(InputError, ValueError):
    """The Tinker service cannot be used: `reason` is "missing_key", "bad_key" or "unreachable"."""

    def __init__(self, reason: str, message: str):
        if reason not in REASONS:
            raise ValueError(f"TinkerUnavailable: reason {reason!r} is not one of {', '.join(REASONS)}")
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str  # "ok", or one of REASONS
    message: str
    models: list[str] = field(default_factory=list)
    base_url: str = DEFAULT_BASE_URL

    def raise_if_unavailable(self) -> ProbeResult:
        if not self.ok:
            raise TinkerUnavailable(self.reason, self.message)
        return self


# --- the probe ---------------------------------------------------------------------------------------------------
_probe_cache: dict[tuple[str, str], tuple[float, ProbeResult]] = {}
_probe_lock = threading.Lock()


def base_url() -> str:
    """TINKER_BASE_URL when set, else the SDK's default (the production service)."""
    return resolve_base_url(None)


def probe(timeout_s: float = PROBE_TIMEOUT_S, *, max_age_s: float = PROBE_CACHE_S) -> ProbeResult:
    """Can the Tinker service be used now, with the key in use? Always returns within about `timeout_s`."""
    url = base_url()
    key = secrets.tinker_key()
    if not key:
        return ProbeResult(
            False,
            "missing_key",
            "No Tinker API key: set TINKER_API_KEY in the environment, or enter your key in the "
            "studio (it is kept for this session only and never saved).",
            [],
            url,
        )
    if not key.startswith(KEY_PREFIXES):
        where = "entered in the studio" if secrets.key_source() == "session" else "in TINKER_API_KEY"
        return ProbeResult(
            False,
            "bad_key",
            f"The Tinker API key {where} is not a Tinker key: keys start with 'tml-'. "
            "Copy it again from the Tinker console.",
            [],
            url,
        )
    cache_key = (hashlib.sha256(key.encode()).hexdigest(), url)
    with _probe_lock:
        cached = _probe_cache.get(cache_key)
    if cached is not None and time.monotonic() - cached[0] < max_age_s:
        return cached[1]
    result = _probe_http(url, key, timeout_s)
    with _probe_lock:
        _probe_cache[cache_key] = (time.monotonic(), result)
    return result


def forget_probe() -> None:
    """Drop cached probe answers (after the key or the URL changed, the next probe asks again)."""
    with _probe_lock:
        _probe_cache.clear()


def _probe_http(url: str, key: str, timeout_s: float) -> ProbeResult:
    """One GET of the capabilities endpoint on a daemon thread, so that not even a hanging DNS lookup (which
    httpx's timeouts do not cover) can keep the caller waiting past the deadline."""
    answer: dict[str, Any] = {}
    finished = threading.Event()

    def request() -> None:
        try:
            answer["response"] = httpx.get(
                url + CAPABILITIES_PATH, headers={AUTH_HEADER: key}, timeout=timeout_s, follow_redirects=False
            )
        except Exception as exc:  # reported below; a probe never raises
            answer["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=request, name="tinker-probe", daemon=True).start()
    if not finished.wait(timeout_s + 0.25):
        return _unreachable(url, f"no answer within {timeout_s:g} s")
    if "error" in answer:
        error = answer["error"]
        detail = secrets.redact(str(error)) or type(error).__name__
        if isinstance(error, httpx.TimeoutException):
            detail = f"no answer within {timeout_s:g} s"
        elif isinstance(error, httpx.ConnectError):
            detail = f"connection failed ({detail})"
        return _unreachable(url, detail)
    return _classify(url, answer["response"])


def _unreachable(url: str, detail: str) -> ProbeResult:
    return ProbeResult(
        False,
        "unreachable",
        f"Cannot reach the Tinker service at {url}: {detail}. Check the network connection"
        + (" and TINKER_BASE_URL." if url != DEFAULT_BASE_URL else "."),
        [],
        url,
    )


def _classify(url: str, response: httpx.Response) -> ProbeResult:
    status = response.status_code
    if status in (401, 403):
        return ProbeResult(
            False,
            "bad_key",
            f"The Tinker service at {url} rejected the API key (HTTP {status}): check "
            "TINKER_API_KEY or the key entered in the studio.",
            [],
            url,
        )
    if status == 402:
        return ProbeResult(
            False,
            "bad_key",
            f"The Tinker service at {url} knows the API key, but its account cannot run jobs "
            "(HTTP 402: billing is not set up).",
            [],
            url,
        )
    if status != 200:
        return ProbeResult(
            False,
            "unreachable",
            f"The Tinker service at {url} is not available: it answered HTTP {status} {response.reason_phrase}.",
            [],
            url,
        )
    try:
        capabilities = types.GetServerCapabilitiesResponse.model_validate(response.json())
    except Exception:
        return ProbeResult(
            False,
            "unreachable",
            f"{url} answered, but not like a Tinker service (no model list at {CAPABILITIES_PATH}).",
            [],
            url,
        )
    names = [m.model_name for m in capabilities.supported_models if m.model_name]
    return ProbeResult(True, "ok", f"Connected to the Tinker service at {url}: {len(names)} models.", names, url)


def list_models(timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """The base models the service offers; raises TinkerUnavailable when it cannot be used."""
    return list(probe(timeout_s).raise_if_unavailable().models)


# --- models: tokenizers and learning rates -------------------------------------------------------------------------
# Hidden sizes of the service's models, for tinker-cookbook's learning-rate formula (hyperparam_utils.get_lr).
HIDDEN_SIZES = {
    "meta-llama/Llama-3.2-1B": 2048,
    "meta-llama/Llama-3.2-3B": 3072,
    "meta-llama/Llama-3.1-8B": 4096,
    "meta-llama/Llama-3.1-8B-Instruct": 4096,
    "meta-llama/Llama-3.1-70B": 8192,
    "meta-llama/Llama-3.3-70B-Instruct": 8192,
    "Qwen/Qwen3-4B-Instruct-2507": 2560,
    "Qwen/Qwen3-8B": 4096,
    "Qwen/Qwen3-8B-Base": 4096,
    "Qwen/Qwen3-30B-A3B": 2048,
    "Qwen/Qwen3-30B-A3B-Base": 2048,
    "Qwen/Qwen3-30B-A3B-Instruct-2507": 2048,
    "Qwen/Qwen3-32B": 5120,
    "Qwen/Qwen3-235B-A22B-Instruct-2507": 4096,
    "Qwen/Qwen3-VL-30B-A3B-Instruct": 2048,
    "Qwen/Qwen3-VL-235B-A22B-Instruct": 4096,
}
FALLBACK_LEARNING_RATE = 2e-4  # models the formula does not cover: a safe LoRA start for large models


def suggested_learning_rate(model: str) -> float:
    """tinker-cookbook's LoRA learning rate: 5e-4 * (2000 / hidden_size) ** exponent, the exponent 0.781 for Llama
    and 0.0775 for Qwen; FALLBACK_LEARNING_RATE for other models (and the default model's own rate for it)."""
    name = models.canonical_name(model).split(":")[0]
    if name == models.DEFAULT_MODEL:
        return models.resolve(name).suggested_learning_rate
    hidden = HIDDEN_SIZES.get(name)
    exponent = 0.781 if "llama" in name.lower() else 0.0775 if "qwen" in name.lower() else None
    if hidden is None or exponent is None:
        return FALLBACK_LEARNING_RATE
    return 5e-4 * (2000 / hidden) ** exponent


def tokenizer_id(model: str) -> str:
    """The Hugging Face id of a hosted model's tokenizer, chosen as the SDK chooses it."""
    name = model.split(":")[0]
    if name.startswith("meta-llama/Llama-3"):
        return "thinkingmachineslabinc/meta-llama-3-instruct-tokenizer"  # ungated copy, as the SDK uses
    if name.count("/") == 2:
        org, repo, _variant = name.split("/", 2)
        return f"{org}/{repo}"
    return name


_tokenizers: dict[str, Any] = {}
_tokenizers_lock = threading.Lock()


def hosted_tokenizer(model: str):
    """The tokenizer of a model the service offers. Probes first, so a missing key, a bad key or an unreachable
    service fail here, clearly, before a run exists; a model the service does not offer fails with ModelError."""
    name = models.canonical_name(model.strip())
    result = probe().raise_if_unavailable()
    if result.models and name not in result.models:
        shown = ", ".join(result.models[:8]) + (", ..." if len(result.models) > 8 else "")
        raise models.ModelError(f"model {model}: the Tinker service does not offer it (it offers {shown})")
    with _tokenizers_lock:
        if name in _tokenizers:
            return _tokenizers[name]
    tokenizer = _load_tokenizer(name)
    with _tokenizers_lock:
        _tokenizers[name] = tokenizer
    return tokenizer


def _load_tokenizer(name: str):
    if name == models.DEFAULT_MODEL or Path(name).expanduser().is_dir():
        return models.load_tokenizer(name)
    from transformers import AutoTokenizer

    hub_id = tokenizer_id(name)
    online = models.hub_reachable()
    try:
        return AutoTokenizer.from_pretrained(hub_id, local_files_only=not online)
    except Exception as exc:
        where = "the Hugging Face hub" if online else "the local Hugging Face cache (the hub is unreachable)"
        raise models.ModelError(
            f"model {name}: could not load its tokenizer {hub_id} from {where}: "
            f"{secrets.redact(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc


# --- the adapter ---------------------------------------------------------------------------------------------------
def _sdk_service_client(**kwargs) -> Any:
    import tinker

    return tinker.ServiceClient(**kwargs)


# Builds the SDK's ServiceClient from keyword arguments (api_key, base_url). Tests put a recording fake here.
CLIENT_FACTORY: Callable[..., Any] = _sdk_service_client


def hosted_service_client(client_factory: Callable[..., Any] | None = None) -> HostedServiceClient:
    """Probe the service (raising TinkerUnavailable with a clear reason), then build the SDK client."""
    result = probe().raise_if_unavailable()
    factory = client_factory or CLIENT_FACTORY
    sdk_client = factory(api_key=secrets.tinker_key(), base_url=result.base_url)
    return HostedServiceClient(sdk_client, result.models)


def _wrapped(sdk_future: Any, wrap: Callable[[Any], Any]) -> ClientFuture:
    """A future of our client around the client inside one of the SDK's futures of clients."""
    return ClientFuture(map_future(sdk_future.future(), wrap))


def _quietly(call: Callable[[], Any]) -> Any:
    """Run an SDK call whose only fault is an SDK deprecation warning we have no replacement for."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return call()


class HostedServiceClient:
    """tinker.ServiceClient behind our protocol: create_* return futures of our clients around the SDK's."""

    def __init__(self, sdk_client: Any, models_offered: list[str]):
        self.sdk = sdk_client
        self.models = list(models_offered)

    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        return types.GetServerCapabilitiesResponse(
            supported_models=[types.SupportedModel(model_name=m) for m in self.models]
        )

    get_server_capabilities_async = async_returning(get_server_capabilities)

    def close(self, status: str, detail: str | None = None):
        """End the session on the service (the SDK's close)."""
        return self.sdk.close(status=status, detail=detail)

    def _check_model(self, base_model: str) -> None:
        if self.models and base_model not in self.models:
            raise models.ModelError(
                f"model {base_model}: the Tinker service does not offer it (it offers {', '.join(self.models[:8])})"
            )

    def _training(self, sdk_future: Any) -> ClientFuture[HostedTrainingClient]:
        return _wrapped(sdk_future, lambda sdk: HostedTrainingClient(self, sdk))

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: Any = None,
    ) -> ClientFuture[HostedTrainingClient]:
        base_model = models.canonical_name(base_model)
        self._check_model(base_model)
        future = self.sdk.create_lora_training_client(
            base_model=base_model,
            rank=rank,
            seed=seed,
            train_mlp=train_mlp,
            train_attn=train_attn,
            train_unembed=train_unembed,
            user_metadata=user_metadata,
            optimizer=optimizer,
        )
        return self._training(future)

    create_lora_training_client_async = async_awaiting(create_lora_training_client)

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any = None,
    ) -> ClientFuture[HostedTrainingClient]:
        future = self.sdk.create_training_client_from_state(
            path=path,
            base_model=base_model,
            user_metadata=user_metadata,
            weights_access_token=weights_access_token,
            optimizer=optimizer,
        )
        return self._training(future)

    create_training_client_from_state_async = async_awaiting(create_training_client_from_state)

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> ClientFuture[HostedTrainingClient]:
        future = self.sdk.create_training_client_from_state_with_optimizer(
            path=path, base_model=base_model, user_metadata=user_metadata, weights_access_token=weights_access_token
        )
        return self._training(future)

    create_training_client_from_state_with_optimizer_async = async_awaiting(
        create_training_client_from_state_with_optimizer
    )

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> ClientFuture[HostedSamplingClient]:
        if not model_path and not base_model:
            raise ValueError("create_sampling_client needs model_path or base_model")
        if base_model and not model_path:
            base_model = models.canonical_name(base_model)
            self._check_model(base_model)
        future = self.sdk.create_sampling_client(
            model_path=model_path or None,
            base_model=base_model or None,
            retry_config=retry_config,
            record_stability_info=record_stability_info,
        )
        return _wrapped(future, lambda sdk: HostedSamplingClient(sdk, model_path))

    create_sampling_client_async = async_awaiting(create_sampling_client)


_chained = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="hosted-sampler")


class HostedTrainingClient:
    """tinker.TrainingClient behind our protocol. Every call returns the SDK's APIFuture at once (await it or call
    .result()); requests run on the service in submission order, so optim_step can be queued right behind
    forward_backward, and the next batch behind both."""

    def __init__(self, service: HostedServiceClient, sdk_client: Any):
        self.service = service
        self.sdk = sdk_client

    @property
    def model_id(self) -> str:
        return self.get_info().model_id

    def get_info(self) -> types.GetInfoResponse:
        return self.sdk.get_info()

    get_info_async = async_returning(get_info)

    def base_model(self) -> str:
        info = self.get_info()
        return info.model_data.model_name or info.model_name or ""

    def get_tokenizer(self):
        return hosted_tokenizer(self.base_model())

    # --- training ----------------------------------------------------------------------------------------------
    def forward(self, data: list[types.Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None):
        return self.sdk.forward(data=data, loss_fn=loss_fn, loss_fn_config=loss_fn_config)

    forward_async = async_returning(forward)

    def forward_backward(
        self, data: list[types.Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None
    ):
        return self.sdk.forward_backward(data=data, loss_fn=loss_fn, loss_fn_config=loss_fn_config)

    forward_backward_async = async_returning(forward_backward)

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: Callable | Any, *, loss_type_input: str | None = None
    ):
        """loss_fn(data, logprobs_list) -> (loss, metrics); the SDK runs it here, on this machine."""
        return self.sdk.forward_backward_custom(data=data, loss_fn=loss_fn, loss_type_input=loss_type_input)

    forward_backward_custom_async = async_returning(forward_backward_custom)

    def optim_step(self, optim_params: types.AdamParams | None = None, *, adam_params: types.AdamParams | None = None):
        return self.sdk.optim_step(optim_params=optim_params, adam_params=adam_params)

    optim_step_async = async_returning(optim_step)

    # --- checkpoints -------------------------------------------------------------------------------------------
    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ):
        """Weights and optimizer state, for resuming; the response's path is tinker://..."""
        return self.sdk.save_state(name=name, ttl_seconds=ttl_seconds, overwrite=overwrite, user_metadata=user_metadata)

    save_state_async = async_returning(save_state)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ):
        return self.sdk.save_weights_for_sampler(name=name, ttl_seconds=ttl_seconds, user_metadata=user_metadata)

    save_weights_for_sampler_async = async_returning(save_weights_for_sampler)

    def load_state(self, path: str, weights_access_token: str | None = None):
        """Deprecated by the SDK (resume with the service's create_training_client_from_state*), kept for parity."""
        return _quietly(lambda: self.sdk.load_state(path=path, weights_access_token=weights_access_token))

    load_state_async = async_returning(load_state)

    def load_state_with_optimizer(self, path: str, weights_access_token: str | None = None):
        return _quietly(
            lambda: self.sdk.load_state_with_optimizer(path=path, weights_access_token=weights_access_token)
        )

    load_state_with_optimizer_async = async_returning(load_state_with_optimizer)

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> ClientFuture[HostedSamplingClient]:
        """A future of a sampling client on the weights as they are after every request submitted before this one.
        With a name the weights are saved persistently (the SDK's own call keeps only ephemeral weights and ignores
        names), so the sampler's model_path can be stored and sampled from later: the save is queued now, in order,
        and the sampling client is made on a helper thread once it is done."""
        if not name:
            future = self.sdk.save_weights_and_get_sampling_client(
                retry_config=retry_config, record_stability_info=record_stability_info, kind=kind
            )
            return _wrapped(future, lambda sdk: HostedSamplingClient(sdk, None))
        if kind != "snapshot":
            raise ValueError(f"save_weights_and_get_sampling_client: named sampler weights are a snapshot, not {kind}")
        saved = self.save_weights_for_sampler(name)

        def sampling_client() -> HostedSamplingClient:
            path = saved.result().path
            return self.create_sampling_client(path, retry_config, record_stability_info).result()

        return ClientFuture(_chained.submit(sampling_client))

    save_weights_and_get_sampling_client_async = async_awaiting(save_weights_and_get_sampling_client)

    def create_sampling_client(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> ClientFuture[HostedSamplingClient]:
        return self.service.create_sampling_client(
            model_path=model_path, retry_config=retry_config, record_stability_info=record_stability_info
        )

    create_sampling_client_async = async_awaiting(create_sampling_client)

    def close(self) -> None:
        """Nothing to free here: the service keeps the run and its checkpoints."""


class HostedSamplingClient:
    """tinker.SamplingClient behind our protocol; `model_path` is the tinker:// path it samples from, if any."""

    def __init__(self, sdk_client: Any, model_path: str | None):
        self.sdk = sdk_client
        self.model_path = model_path

    def get_base_model(self) -> str:
        return self.sdk.get_base_model()

    get_base_model_async = async_returning(get_base_model)

    def get_tokenizer(self):
        return hosted_tokenizer(self.get_base_model())

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ):
        return self.sdk.sample(
            prompt=prompt,
            num_samples=num_samples,
            sampling_params=sampling_params,
            include_prompt_logprobs=include_prompt_logprobs,
            topk_prompt_logprobs=topk_prompt_logprobs,
            topk_sample_logprobs=topk_sample_logprobs,
            target_prompt_logprobs=target_prompt_logprobs,
            prompt_alt_tokens_k=prompt_alt_tokens_k,
            prompt_logprobs_last_n=prompt_logprobs_last_n,
        )

    sample_async = async_awaiting(sample)

    def compute_logprobs(self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None):
        """Log-probabilities of the prompt's tokens; index 0 is None."""
        return self.sdk.compute_logprobs(prompt=prompt, prompt_logprobs_last_n=prompt_logprobs_last_n)

    compute_logprobs_async = async_awaiting(compute_logprobs)


def _conforms(service: HostedServiceClient, training: HostedTrainingClient, sampling: HostedSamplingClient) -> None:
    """Never called: mypy checks here that these classes offer every member of the Protocols, typed compatibly."""
    _service: protocol.ServiceClient = service
    _training: protocol.TrainingClient = training
    _sampling: protocol.SamplingClient = sampling
