"""The client surface every backend offers: the tinker SDK's own, so loops never know which backend runs them.

Loops talk to a ServiceClient (create training / sampling clients), a TrainingClient (forward_backward,
optim_step, save/load state, sampler weights) and a SamplingClient (sample, compute_logprobs), all exchanging the
SDK's real `tinker.types` objects. Calls return futures with `.result()` that can also be awaited. This module holds
the typing Protocols and the future type the local backends return; it contains no backend logic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from typing import Any, Callable, Generic, Protocol, TypeVar

from tinker import types

T = TypeVar("T")

LOSS_FUNCTIONS = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo")  # what the local backend computes


class LocalFuture(Generic[T]):
    """A future with the SDK's APIFuture surface: result(), result_async(), future(), and `await`."""

    def __init__(self, future: concurrent.futures.Future):
        self._future = future

    @classmethod
    def completed(cls, value: T) -> "LocalFuture[T]":
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
            warnings.warn(f"Reading `.{name}` from the future a client-creation method returned is deprecated (as in "
                          "the tinker SDK): call .result() on it, or await it, to get the client first.",
                          FutureWarning, stacklevel=2)
        return getattr(self.result(), name)


class SamplingClient(Protocol):
    def sample(self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams,
               include_prompt_logprobs: bool = False) -> Any: ...
    async def sample_async(self, prompt: types.ModelInput, num_samples: int,
                           sampling_params: types.SamplingParams, include_prompt_logprobs: bool = False
                           ) -> types.SampleResponse: ...
    def compute_logprobs(self, prompt: types.ModelInput) -> Any: ...
    def get_tokenizer(self) -> Any: ...
    def get_base_model(self) -> str: ...


class TrainingClient(Protocol):
    def forward(self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict | None = None) -> Any: ...
    def forward_backward(self, data: list[types.Datum], loss_fn: str,
                         loss_fn_config: dict | None = None) -> Any: ...
    def forward_backward_custom(self, data: list[types.Datum], loss_fn: Callable) -> Any: ...
    def optim_step(self, adam_params: types.AdamParams) -> Any: ...
    def save_state(self, name: str) -> Any: ...
    def load_state(self, path: str) -> Any: ...
    def load_state_with_optimizer(self, path: str) -> Any: ...
    def save_weights_for_sampler(self, name: str) -> Any: ...
    def save_weights_and_get_sampling_client(self, name: str | None = None) -> SamplingClient: ...
    def get_info(self) -> types.GetInfoResponse: ...
    def get_tokenizer(self) -> Any: ...


class ServiceClient(Protocol):
    def create_lora_training_client(self, base_model: str, rank: int = 32, seed: int | None = None,
                                    train_mlp: bool = True, train_attn: bool = True,
                                    train_unembed: bool = True) -> TrainingClient: ...
    def create_training_client_from_state(self, path: str) -> TrainingClient: ...
    def create_training_client_from_state_with_optimizer(self, path: str) -> TrainingClient: ...
    def create_sampling_client(self, model_path: str | None = None,
                               base_model: str | None = None) -> SamplingClient: ...
    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse: ...
