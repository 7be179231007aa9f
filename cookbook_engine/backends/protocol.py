"""The client surface every backend offers: the tinker SDK's own, so loops never know which backend runs them.

Loops talk to a ServiceClient (create training / sampling clients), a TrainingClient (forward_backward,
optim_step, save/load state, sampler weights) and a SamplingClient (sample, compute_logprobs), all exchanging the
SDK's real `tinker.types` objects. Calls return futures with `.result()` that can also be awaited; the `*_async`
variants the loops use return such a future once the request is queued. This module holds the typing Protocols
(the loops' signatures name them; tests/test_client_protocols.py checks the local backend and the SDK offer every
member) and the future type the local backends return; it contains no backend logic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from collections.abc import Callable, Generator
from typing import Any, Generic, Protocol, Self, TypeVar

from tinker import types

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

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
    """A future of fn(result): fn runs when `future` finishes (on whichever thread finishes it); errors pass on."""
    out: concurrent.futures.Future = concurrent.futures.Future()

    def settle(done: concurrent.futures.Future) -> None:
        try:
            out.set_result(fn(done.result()))
        except BaseException as exc:
            out.set_exception(exc)

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


class SamplingClient(Protocol):
    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
    ) -> ResultFuture[types.SampleResponse]: ...
    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
    ) -> types.SampleResponse: ...
    def compute_logprobs(self, prompt: types.ModelInput) -> ResultFuture[list[float | None]]: ...
    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float | None]: ...
    def get_tokenizer(self) -> Any: ...
    def get_base_model(self) -> str: ...
    async def get_base_model_async(self) -> str: ...


class TrainingClient(Protocol):
    """The loops' training surface. The `*_async` calls return a future once the request is queued, so a loop can
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
        self, data: list[types.Datum], loss_fn: Callable
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    async def forward_backward_custom_async(
        self, data: list[types.Datum], loss_fn: Callable
    ) -> ResultFuture[types.ForwardBackwardOutput]: ...
    def optim_step(self, optim_params: types.AdamParams) -> ResultFuture[types.OptimStepResponse]: ...
    async def optim_step_async(self, optim_params: types.AdamParams) -> ResultFuture[types.OptimStepResponse]: ...
    def save_state(self, name: str) -> ResultFuture[types.SaveWeightsResponse]: ...
    async def save_state_async(self, name: str) -> ResultFuture[types.SaveWeightsResponse]: ...
    def load_state(self, path: str) -> ResultFuture[Any]: ...
    async def load_state_async(self, path: str) -> ResultFuture[Any]: ...
    def load_state_with_optimizer(self, path: str) -> ResultFuture[Any]: ...
    async def load_state_with_optimizer_async(self, path: str) -> ResultFuture[Any]: ...
    def save_weights_for_sampler(self, name: str) -> ResultFuture[types.SaveWeightsForSamplerResponse]: ...
    async def save_weights_for_sampler_async(self, name: str) -> ResultFuture[types.SaveWeightsForSamplerResponse]: ...
    def save_weights_and_get_sampling_client(self, name: str | None = None) -> SamplingClient: ...
    async def save_weights_and_get_sampling_client_async(self, name: str | None = None) -> SamplingClient: ...
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
    ) -> ResultFuture[TrainingClient]: ...
    async def create_lora_training_client_async(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
    ) -> TrainingClient: ...
    def create_training_client_from_state(self, path: str) -> ResultFuture[TrainingClient]: ...
    async def create_training_client_from_state_async(self, path: str) -> TrainingClient: ...
    def create_training_client_from_state_with_optimizer(self, path: str) -> ResultFuture[TrainingClient]: ...
    async def create_training_client_from_state_with_optimizer_async(self, path: str) -> TrainingClient: ...
    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> ResultFuture[SamplingClient]: ...
    async def create_sampling_client_async(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> SamplingClient: ...
    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse: ...
    async def get_server_capabilities_async(self) -> types.GetServerCapabilitiesResponse: ...


class QueuedTrainingCalls:
    """The `*_async` training calls of a client whose plain calls queue the request and return its future (the
    clocked simulator's and the hosted backend's clients): each async call queues the same request and returns the
    future, the SDK's shape (`await (await client.forward_backward_async(...))`). Not for the local client, whose
    async calls take more of the SDK's options."""

    async def forward_async(self: Any, data, loss_fn="cross_entropy", loss_fn_config=None):
        return self.forward(data, loss_fn, loss_fn_config)

    async def forward_backward_async(self: Any, data, loss_fn="cross_entropy", loss_fn_config=None):
        return self.forward_backward(data, loss_fn, loss_fn_config)

    async def forward_backward_custom_async(self: Any, data, loss_fn, **kw):
        return self.forward_backward_custom(data, loss_fn, **kw)

    async def optim_step_async(self: Any, optim_params):
        return self.optim_step(optim_params)

    async def save_state_async(self: Any, name):
        return self.save_state(name)

    async def save_weights_for_sampler_async(self: Any, name):
        return self.save_weights_for_sampler(name)

    async def load_state_async(self: Any, path):
        return self.load_state(path)

    async def load_state_with_optimizer_async(self: Any, path):
        return self.load_state_with_optimizer(path)


class QueuedSamplingCalls:
    """The `*_async` sampling calls of a client whose plain calls return futures: each awaits its result."""

    async def get_base_model_async(self: Any) -> str:
        return self.get_base_model()

    async def sample_async(self: Any, prompt, num_samples, sampling_params, include_prompt_logprobs=False, **options):
        return await self.sample(prompt, num_samples, sampling_params, include_prompt_logprobs, **options)

    async def compute_logprobs_async(self: Any, prompt):
        return await self.compute_logprobs(prompt)
