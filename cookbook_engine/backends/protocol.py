"""The client surface every backend offers: the tinker SDK's own, so loops never know which backend runs them.

Loops talk to a ServiceClient (create training / sampling clients), a TrainingClient (forward_backward,
optim_step, save/load state, sampler weights) and a SamplingClient (sample, compute_logprobs), all exchanging the
SDK's real `tinker.types` objects. This module holds the one declaration of that surface, the typing Protocols the
loops' signatures name; each member is the installed SDK's method with the SDK's parameters (names, order,
defaults), which tests/test_client_protocols.py checks against the installed `tinker` package, together with every
backend's signature of every member. Also here: the future type the local backends return, and `async_twin`, which
makes a backend's `<name>_async` method from its plain `<name>` so each operation is written once.

Calls return futures with `.result()` that can also be awaited (the SDK 0.38 style, `await client.forward(...)`).
The SDK's `*_async` variants (deprecated by 0.38) come in two shapes, copied here member by member: a training
request's (`forward_async`, `optim_step_async`, ...) returns the request's future once it is queued, so a loop can
submit the next request before awaiting the previous one (`await (await client.forward_backward_async(...))`); the
others (`sample_async`, `create_*_async`, `get_info_async`, ...) return the value. It contains no backend logic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar

from tinker import types

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
P = ParamSpec("P")
C = TypeVar("C")  # the client class a twin method belongs to

# what the local backend computes
LOSS_FUNCTIONS = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce")


class LocalFuture(Generic[T]):
    """A future with the SDK's APIFuture surface: result(), result_async(), future(), and `await`."""

    def __init__(self, future: concurrent.futures.Future):
        self._future = future

    @classmethod
    def completed(cls, value: T) -> Self:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(value)
        return cls(future)

    def result(self, timeout: float | None = None) -> T:
        return self._future.result(timeout)

    async def result_async(self, timeout: float | None = None) -> T:
        return await asyncio.wait_for(asyncio.wrap_future(self._future), timeout)

    def future(self) -> concurrent.futures.Future:
        return self._future

    def done(self) -> bool:
        return self._future.done()

    @property
    def compute_seconds(self) -> float | None:
        """Seconds the local model worker computed for this request, without the time it waited for its turn (in
        this process's queue or for another process's compute lease); None where that is not known."""
        return getattr(self._future, "compute_seconds", None)

    def __await__(self):
        return asyncio.wrap_future(self._future).__await__()

    async def coroutine(self) -> T:
        return await self


def map_future(future: concurrent.futures.Future, fn: Callable[[Any], Any]) -> concurrent.futures.Future:
    """A future of fn(result): fn runs when `future` finishes (on whichever thread finishes it); errors pass on.
    When the returned future was cancelled meanwhile (nobody waits for it), fn still runs and its outcome is dropped."""
    out: concurrent.futures.Future = concurrent.futures.Future()

    def settle(done: concurrent.futures.Future) -> None:
        try:
            value = fn(done.result())
        except BaseException as exc:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                out.set_exception(exc)
            return
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            out.set_result(value)

    future.add_done_callback(settle)
    return out


_warned_client_futures: set[str] = set()


class ClientFuture(LocalFuture[T]):
    """A future of a client, as the SDK's create_* methods return (BackcompatTrainingClientFuture and kin): take the
    client with `.result()` or `await`. Like the SDK, it can still be used as the client itself (deprecated): each
    attribute is read from the finished client, with one FutureWarning per attribute name per process."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in _warned_client_futures:
            _warned_client_futures.add(name)
            warnings.warn(
                f"Reading `.{name}` from the future a client-creation method returned is deprecated (as in "
                "the tinker SDK): call .result() on it, or await it, to get the client first.",
                FutureWarning,
                stacklevel=2,
            )
        return getattr(self.result(), name)


class ResultFuture(Protocol[T_co]):
    """What every client call returns: the SDK's APIFuture, LocalFuture here. Take the value with `.result()` or
    `await`."""

    def result(self, timeout: float | None = None) -> T_co: ...
    def __await__(self) -> Generator[Any, None, T_co]: ...


# --- the SDK's surface (tinker 0.38), member by member: the plain call, then its `*_async` variant -----------------
class SamplingClient(Protocol):
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
    ) -> ResultFuture[types.SampleResponse]: ...
    async def sample_async(
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
    ) -> types.SampleResponse: ...
    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> ResultFuture[list[float | None]]: ...
    async def compute_logprobs_async(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]: ...
    def get_tokenizer(self) -> Any: ...
    def get_base_model(self) -> str: ...
    async def get_base_model_async(self) -> str: ...


class TrainingClient(Protocol):
    """The loops' training surface. The `*_async` requests return a future once the request is queued, so a loop can
    submit the next request before awaiting the previous one's result (`await (await client.x_async(...))`)."""

    def forward(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    async def forward_async(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    def forward_backward(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    async def forward_backward_async(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: Callable, *, loss_type_input: str | None = None
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    async def forward_backward_custom_async(
        self, data: list[types.Datum], loss_fn: Callable, *, loss_type_input: str | None = None
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    def optim_step(
        self, optim_params: types.AdamParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> ResultFuture[types.OptimStepResponse]: ...
    async def optim_step_async(
        self, optim_params: types.AdamParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> ResultFuture[types.OptimStepResponse]: ...
    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> ResultFuture[types.SaveWeightsResponse]: ...
    async def save_state_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> ResultFuture[types.SaveWeightsResponse]: ...
    def load_state(
        self, path: str, weights_access_token: str | None = None
    ) -> ResultFuture[types.LoadWeightsResponse]: ...
    async def load_state_async(
        self, path: str, weights_access_token: str | None = None
    ) -> ResultFuture[types.LoadWeightsResponse]: ...
    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> ResultFuture[types.LoadWeightsResponse]: ...
    async def load_state_with_optimizer_async(
        self, path: str, weights_access_token: str | None = None
    ) -> ResultFuture[types.LoadWeightsResponse]: ...
    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> ResultFuture[types.SaveWeightsForSamplerResponse]: ...
    async def save_weights_for_sampler_async(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> ResultFuture[types.SaveWeightsForSamplerResponse]: ...
    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> ResultFuture[SamplingClient]: ...
    async def save_weights_and_get_sampling_client_async(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> SamplingClient: ...
    def create_sampling_client(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> ResultFuture[SamplingClient]: ...
    async def create_sampling_client_async(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> SamplingClient: ...
    def get_info(self) -> types.GetInfoResponse: ...
    async def get_info_async(self) -> types.GetInfoResponse: ...
    def get_tokenizer(self) -> Any: ...


class ServiceClient(Protocol):
    """create_* return futures of clients (the SDK's backcompat futures, ClientFuture here); the `*_async` variants
    the clients themselves."""

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
    ) -> ResultFuture[TrainingClient]: ...
    async def create_lora_training_client_async(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: Any = None,
    ) -> TrainingClient: ...
    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any = None,
    ) -> ResultFuture[TrainingClient]: ...
    async def create_training_client_from_state_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any = None,
    ) -> TrainingClient: ...
    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> ResultFuture[TrainingClient]: ...
    async def create_training_client_from_state_with_optimizer_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> TrainingClient: ...
    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> ResultFuture[SamplingClient]: ...
    async def create_sampling_client_async(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> SamplingClient: ...
    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse: ...
    async def get_server_capabilities_async(self) -> types.GetServerCapabilitiesResponse: ...
    def close(self, status: str, detail: str | None = None) -> ResultFuture[None]: ...


# --- one body per operation: the `*_async` twin of a backend's plain method ----------------------------------------
def async_returning(
    plain: Callable[Concatenate[C, P], T],
) -> Callable[Concatenate[C, P], Coroutine[Any, Any, T]]:
    """`<name>_async` that returns what `<name>` returns, for the SDK's `*_async` variants that hand back the
    request's future once it is queued (forward_async, optim_step_async, save_state_async, ...) or a plain value
    (get_info_async). Use in a class body: `forward_async = async_returning(forward)`."""

    async def twin(self: C, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return plain(self, *args, **kwargs)

    return _named_twin(twin, plain, "async_returning")


def async_awaiting(
    plain: Callable[Concatenate[C, P], Awaitable[T]],
) -> Callable[Concatenate[C, P], Coroutine[Any, Any, T]]:
    """`<name>_async` that awaits the future `<name>` returns and returns its value, for the SDK's `*_async`
    variants that return the value (sample_async, compute_logprobs_async, create_*_async, ...): as the SDK's own
    deprecated methods do, `return await self.<name>(...)`."""

    async def twin(self: C, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await plain(self, *args, **kwargs)

    return _named_twin(twin, plain, "async_awaiting")


def _named_twin(twin: Any, plain: Callable, maker: str) -> Any:
    """The twin carries the plain method's signature (what inspect and the signature tests read) and its name with
    `_async` appended; no `__wrapped__`, so inspect still sees a coroutine function."""
    twin.__name__ = f"{plain.__name__}_async"
    twin.__qualname__ = f"{plain.__qualname__}_async"
    twin.__module__ = plain.__module__
    twin.__doc__ = f"The async variant of `{plain.__name__}` (made from it by protocol.{maker})."
    twin.__signature__ = inspect.signature(plain)
    return twin
