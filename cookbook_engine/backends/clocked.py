"""The clocked simulator: the local backend admitted only at clock ticks, like Tinker's worker pools, to count how
many clock cycles each training step costs.

Tinker runs training in lock-step clock cycles: at the start of a cycle the pool takes the requests already queued,
does their forward-backward passes and one optimizer step per model, and answers at the end of the cycle. A request
that arrives after a cycle started waits for the next one, so a loop that waits for one answer before sending the
next request pays whole cycles for each round trip. This backend reproduces that on top of the local backend:

- every request to a clocked training or sampling client is queued, and the call returns a future at once;
- a clock ticks every `period_s`. At each tick the simulator first waits until the work admitted at the previous
  tick has finished (a cycle lasts `period_s`, or longer when its work does: so the counts below do not depend on
  how fast, or how loaded, this CPU is), then admits the queued requests (one cycle), runs them on the local
  backend, and only then releases the answers of the previous cycle. An answer therefore arrives one tick after
  its request was admitted, and anything sent in reply to it waits for the tick after that. A period in which
  nothing is queued and nothing is to be answered (the loop is still computing its next request) is not counted
  as a tick, so the loop's own think time, which grows when the CPU is loaded, never adds cycles;
- per training client a cycle admits requests in order up to and including one optim_step, plus the checkpoint
  requests queued right behind it; the next forward/forward_backward/optim_step waits for the next cycle. Sampling
  requests (a separate pool at Tinker) are all admitted at each tick, or, with `samples_per_tick=N`, the N oldest
  (a sampler pool of fixed capacity: a step's rollouts then come back in waves, one wave per cycle, which is what
  RL's streaming-minibatch mode overlaps with training).

`service.tick_count` counts ticks, `service.cycles` the ticks that admitted work, and `service.optim_step_ticks`
the tick at which each optim_step's answer was released; `cycles_per_step()` is the mean distance between those,
the steady-state cost of one training step; `cycle_log` lists the methods each cycle admitted. The counts live in
`service.stats`, which outlives the service (`latest_stats()` gives the last one created, e.g. after a run the
RunManager ended). A loop that submits forward_backward and optim_step back to back and queues the next step
before awaiting the previous one pays 1 cycle per step; awaiting each step before sending the next pays 2;
awaiting forward_backward before sending optim_step pays 4.

Choosing the period: the answers of a cycle arrive at the next tick, and the loop must have queued its next step
before the tick after that, so the loop's own work per step (logging to DuckDB, building the batch: ~50 ms here)
should fit in one period; when it does not (a loaded CPU) the wait is not counted (`idle_waits`). Periods of
0.2-0.5 s with tiny batches (2 short examples) keep the figures exact on this 2-core CPU; compute longer than the
period only stretches the cycle, it never changes the counts.

Not here: a model of the service's latency or capacity, multi-tenant pools, anything but counting cycles.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tinker import types

from cookbook_engine.backends import protocol
from cookbook_engine.backends.clocked_settings import ClockedConfig
from cookbook_engine.backends.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient
from cookbook_engine.backends.protocol import (
    ClientFuture,
    LocalFuture,
    async_awaiting,
    async_returning,
    map_future,
)
from cookbook_engine.settings import bound_problems
from storage.statuses import SessionEnd

# A request's kind decides its admission: a cycle admits a training client's requests up to one optim_step, and
# after it only checkpoint requests; sampling requests are all admitted at each tick.
STEP, OPTIM_STEP, CHECKPOINT, SAMPLE = "step", "optim_step", "checkpoint", "sample"
KIND_OF_METHOD = {
    "forward": STEP,
    "forward_backward": STEP,
    "forward_backward_custom": STEP,
    "optim_step": OPTIM_STEP,
    "save_state": CHECKPOINT,
    "save_weights_for_sampler": CHECKPOINT,
    "load_state": CHECKPOINT,
    "load_state_with_optimizer": CHECKPOINT,
    "save_weights_and_get_sampling_client": CHECKPOINT,
    "sample": SAMPLE,
    "compute_logprobs": SAMPLE,
}

_queue_ids = itertools.count(1)
_request_order = itertools.count(1)


@dataclass
class ClockStats:
    """A clocked service's counts. They outlive the service, so they can be read after a run has ended."""

    period_s: float
    tick_count: int = 0  # ticks so far (not counting waits for the client: see idle_waits)
    cycles: int = 0  # ticks that admitted work
    idle_waits: int = 0  # periods with nothing queued and nothing to answer: the client was busy, no tick counted
    cycle_log: list[tuple[int, list[str]]] = field(default_factory=list)  # (tick, methods admitted), work ticks only
    optim_step_ticks: list[int] = field(default_factory=list)  # tick at which each optim_step's answer came

    def cycles_per_step(self) -> float | None:
        """Clock cycles between consecutive optimizer steps' answers, on average (None before two steps)."""
        ticks = self.optim_step_ticks
        if len(ticks) < 2:
            return None
        return (ticks[-1] - ticks[0]) / (len(ticks) - 1)


_latest_stats: ClockStats | None = None


def latest_stats() -> ClockStats | None:
    """The counts of the most recently created clocked service in this process (benchmarks and tests read them
    after a run that the RunManager started and ended)."""
    return _latest_stats


@dataclass
class _Request:
    method: str  # the client method that made it (a key of KIND_OF_METHOD)
    start: Callable[[], LocalFuture]  # submits the work to the local backend
    wrap: Callable[[Any], Any] | None = None  # turns the local result into the clocked one (sampling clients)
    outer: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    inner: LocalFuture | None = None
    order: int = field(default_factory=lambda: next(_request_order))  # submission order, across all clients

    @property
    def kind(self) -> str:
        return KIND_OF_METHOD[self.method]


class ClockedServiceClient:
    """Drop-in for tinker.ServiceClient whose training and sampling clients are admitted only at clock ticks."""

    @classmethod
    def from_config(cls, settings: ClockedConfig) -> ClockedServiceClient:
        return cls(settings.period_s, settings.samples_per_tick)

    def __init__(self, period_s: float = 0.05, samples_per_tick: int = 0):
        global _latest_stats
        problems = bound_problems(ClockedConfig(period_s, samples_per_tick))  # the bounds a run's config has
        if problems:
            raise ValueError("; ".join(f"clocked.{problem}" for problem in problems))
        self.period_s = float(period_s)
        self.samples_per_tick = int(samples_per_tick)
        self.local = LocalServiceClient()
        self.stats = _latest_stats = ClockStats(self.period_s)
        self._lock = threading.Lock()
        self._queues: dict[int, collections.deque[_Request]] = {}
        self._sampling_queues: set[int] = set()
        self._in_flight: list[_Request] = []
        self._closed = False
        threading.Thread(
            target=_run_clock, args=(weakref.ref(self), self.period_s), name="clocked-backend", daemon=True
        ).start()

    # --- the clock -----------------------------------------------------------------------------------------------
    def _new_queue(self, owner: object, sampling: bool = False) -> int:
        """A FIFO for one client; it goes away with the client (RL makes a sampling client every step)."""
        queue_id = next(_queue_ids)
        with self._lock:
            self._queues[queue_id] = collections.deque()
            if sampling:
                self._sampling_queues.add(queue_id)
        weakref.finalize(owner, self._drop_queue, queue_id)
        return queue_id

    def _drop_queue(self, queue_id: int) -> None:
        with self._lock:
            self._queues.pop(queue_id, None)
            self._sampling_queues.discard(queue_id)

    def submit(
        self, queue_id: int, method: str, start: Callable[[], LocalFuture], wrap: Callable[[Any], Any] | None = None
    ) -> LocalFuture:
        """Queue a request for the next tick; its future resolves one tick after it is admitted."""
        if method not in KIND_OF_METHOD:
            raise ValueError(f"clocked backend: unknown request {method!r}")
        request = _Request(method, start, wrap)
        with self._lock:
            if self._closed:
                raise RuntimeError("the clocked backend is closed")
            self._queues[queue_id].append(request)
        return LocalFuture(request.outer)

    def _tick(self) -> None:
        """One clock tick: wait for the previous cycle's work, admit the queued requests, release the previous
        cycle's answers (in that order, so that nothing sent in reply to an answer makes this cycle)."""
        previous = self._in_flight
        concurrent.futures.wait([r.inner.future() for r in previous if r.inner is not None])
        with self._lock:
            admitted = self._admit()
            if not admitted and not previous:  # the service waits for its client's next request: no cycle passes
                self.stats.idle_waits += 1
                return
            self.stats.tick_count += 1
            tick = self.stats.tick_count
        for request in admitted:
            try:
                request.inner = request.start()
            except BaseException as exc:  # a bad request fails alone, at its release
                failed: concurrent.futures.Future = concurrent.futures.Future()
                failed.set_exception(exc)
                request.inner = LocalFuture(failed)
        if admitted:
            self.stats.cycles += 1
            self.stats.cycle_log.append((tick, [r.method for r in admitted]))
        self._in_flight = admitted
        for request in previous:
            self._release(request, tick)

    def _admit(self) -> list[_Request]:
        admitted = []
        for queue_id, queue in self._queues.items():
            if queue_id in self._sampling_queues:
                continue
            optim_admitted = False
            while queue:
                if optim_admitted and queue[0].kind in (STEP, OPTIM_STEP):
                    break
                request = queue.popleft()
                admitted.append(request)
                optim_admitted = optim_admitted or request.kind == OPTIM_STEP
        return admitted + self._admit_samples()

    def _admit_samples(self) -> list[_Request]:
        """Every queued sampling request, or the `samples_per_tick` oldest of them (across sampling clients)."""
        waiting = sorted(
            (request.order, queue_id) for queue_id in self._sampling_queues for request in self._queues[queue_id]
        )
        if self.samples_per_tick:
            waiting = waiting[: self.samples_per_tick]
        # each client's queue is in submission order, so the globally oldest are a prefix of each queue
        return [self._queues[queue_id].popleft() for _, queue_id in waiting]

    def _release(self, request: _Request, tick: int) -> None:
        assert request.inner is not None, "released before it was admitted"
        inner = request.inner.future()
        if inner.exception() is not None:
            request.outer.set_exception(inner.exception())
            return
        try:
            value = request.wrap(inner.result()) if request.wrap else inner.result()
        except BaseException as exc:
            request.outer.set_exception(exc)
            return
        if request.kind == OPTIM_STEP:
            self.stats.optim_step_ticks.append(tick)  # before the answer, so whoever awaits it sees the count
        request.outer.set_result(value)

    @property
    def tick_count(self) -> int:
        return self.stats.tick_count

    @property
    def cycles(self) -> int:
        return self.stats.cycles

    @property
    def cycle_log(self) -> list[tuple[int, list[str]]]:
        return self.stats.cycle_log

    @property
    def optim_step_ticks(self) -> list[int]:
        return self.stats.optim_step_ticks

    def cycles_per_step(self) -> float | None:
        return self.stats.cycles_per_step()

    def stop(self, reason: str = "the clocked backend was closed before this request ran") -> None:
        """Stop the clock; requests still queued or running fail."""
        with self._lock:
            self._closed = True
            pending = [r for queue in self._queues.values() for r in queue] + list(self._in_flight)
            for queue in self._queues.values():
                queue.clear()
        for request in pending:
            if not request.outer.done():
                request.outer.set_exception(RuntimeError(reason))

    def __enter__(self) -> ClockedServiceClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- the service surface -------------------------------------------------------------------------------------
    def close(self, status: str = SessionEnd.SUCCESS, detail: str | None = None) -> LocalFuture:
        """End the session (the SDK's close): stop the clock, then close the local session it runs on."""
        self.stop()
        return self.local.close(status, detail)

    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        return self.local.get_server_capabilities()

    get_server_capabilities_async = async_returning(get_server_capabilities)

    # Like the SDK (and the local backend), create_* return futures of clients; the *_async variants the clients.
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
    ) -> ClientFuture:
        local = self.local.create_lora_training_client(
            base_model, rank, seed, train_mlp, train_attn, train_unembed, user_metadata, optimizer
        )
        return self._clocked(local, lambda client: ClockedTrainingClient(self, client))

    create_lora_training_client_async = async_awaiting(create_lora_training_client)

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any = None,
    ) -> ClientFuture:
        local = self.local.create_training_client_from_state(
            path, base_model, user_metadata, weights_access_token, optimizer
        )
        return self._clocked(local, lambda client: ClockedTrainingClient(self, client))

    create_training_client_from_state_async = async_awaiting(create_training_client_from_state)

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> ClientFuture:
        local = self.local.create_training_client_from_state_with_optimizer(
            path, base_model, user_metadata, weights_access_token
        )
        return self._clocked(local, lambda client: ClockedTrainingClient(self, client))

    create_training_client_from_state_with_optimizer_async = async_awaiting(
        create_training_client_from_state_with_optimizer
    )

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> ClientFuture:
        local = self.local.create_sampling_client(model_path, base_model, retry_config, record_stability_info)
        return self._clocked(local, lambda client: ClockedSamplingClient(self, client))

    create_sampling_client_async = async_awaiting(create_sampling_client)

    @staticmethod
    def _clocked(local: ClientFuture, wrap: Callable[[Any], Any]) -> ClientFuture:
        """A future of the clocked client around the local client that `local` will hold (clients are made at
        once, not at a tick: the service creates them outside its worker pools)."""
        return ClientFuture(map_future(local.future(), wrap))


def _run_clock(service_ref: weakref.ref[ClockedServiceClient], period_s: float) -> None:
    """The clock thread: ticks every period until its service is closed or garbage-collected."""
    next_tick = time.monotonic() + period_s
    while True:
        time.sleep(max(0.0, next_tick - time.monotonic()))
        service = service_ref()
        if service is None or service._closed:
            return
        try:
            service._tick()
        except Exception as exc:  # never leave a loop waiting on a clock that died
            service.stop(f"the clocked backend's clock failed: {type(exc).__name__}: {exc}")
            return
        next_tick = time.monotonic() + period_s  # a cycle lasts the period, or longer when its work does
        del service


class ClockedTrainingClient:
    """A local training client whose requests wait for the clock."""

    LOCAL_CHECKPOINTS = True  # its checkpoints are the local client's folders

    def __init__(self, service: ClockedServiceClient, local: LocalTrainingClient):
        self.service, self.local = service, local
        self.model_id = local.model_id
        self._queue = service._new_queue(self)

    def _submit(self, method: str, start: Callable[[], LocalFuture], wrap: Callable[[Any], Any] | None = None):
        return self.service.submit(self._queue, method, start, wrap)

    def get_tokenizer(self):
        return self.local.get_tokenizer()

    def fix_lora_a(self, directions) -> LocalFuture:
        """The local client's (training/null_space.py); asked before a run's first step, so it does not wait."""
        return self.local.fix_lora_a(directions)

    def decay_lora_b(self, decay) -> LocalFuture:
        """The local client's (training/null_space.py `keep_decay_matrices`); asked before a run's first step."""
        return self.local.decay_lora_b(decay)

    def get_info(self) -> types.GetInfoResponse:
        return self.local.get_info()

    get_info_async = async_returning(get_info)

    def forward(
        self, data: list[types.Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None
    ) -> LocalFuture:
        return self._submit("forward", lambda: self.local.forward(data, loss_fn, loss_fn_config))

    forward_async = async_returning(forward)

    def forward_backward(
        self, data: list[types.Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None
    ) -> LocalFuture:
        return self._submit("forward_backward", lambda: self.local.forward_backward(data, loss_fn, loss_fn_config))

    forward_backward_async = async_returning(forward_backward)

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: Callable | Any, *, loss_type_input: str | None = None
    ) -> LocalFuture:
        return self._submit(
            "forward_backward_custom",
            lambda: self.local.forward_backward_custom(data, loss_fn, loss_type_input=loss_type_input),
        )

    forward_backward_custom_async = async_returning(forward_backward_custom)

    def optim_step(
        self, optim_params: types.AdamParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> LocalFuture:
        return self._submit("optim_step", lambda: self.local.optim_step(optim_params, adam_params=adam_params))

    optim_step_async = async_returning(optim_step)

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalFuture:
        return self._submit("save_state", lambda: self.local.save_state(name, ttl_seconds, overwrite, user_metadata))

    save_state_async = async_returning(save_state)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture:
        return self._submit(
            "save_weights_for_sampler", lambda: self.local.save_weights_for_sampler(name, ttl_seconds, user_metadata)
        )

    save_weights_for_sampler_async = async_returning(save_weights_for_sampler)

    def load_state(self, path: str, weights_access_token: str | None = None) -> LocalFuture:
        return self._submit("load_state", lambda: self.local.load_state(path, weights_access_token))

    load_state_async = async_returning(load_state)

    def load_state_with_optimizer(self, path: str, weights_access_token: str | None = None) -> LocalFuture:
        return self._submit(
            "load_state_with_optimizer", lambda: self.local.load_state_with_optimizer(path, weights_access_token)
        )

    load_state_with_optimizer_async = async_returning(load_state_with_optimizer)

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> ClientFuture:
        """Queued for the clock like any request; at its tick the local worker makes the sampling client (what the
        local client's own call does, without blocking the clock thread)."""
        make = self.local.sampling_client_maker(name, retry_config, record_stability_info, kind)
        request = self._submit(
            "save_weights_and_get_sampling_client",
            lambda: self.local._worker.submit(make),
            wrap=lambda sampler: ClockedSamplingClient(self.service, sampler),
        )
        return ClientFuture(request.future())

    save_weights_and_get_sampling_client_async = async_awaiting(save_weights_and_get_sampling_client)

    def create_sampling_client(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> ClientFuture:
        return self.service.create_sampling_client(
            model_path=model_path, retry_config=retry_config, record_stability_info=record_stability_info
        )

    create_sampling_client_async = async_awaiting(create_sampling_client)

    def close(self) -> None:
        self.local.close()


class ClockedSamplingClient:
    """A local sampling client whose requests wait for the clock (all queued samples are admitted each tick)."""

    def __init__(self, service: ClockedServiceClient, local: LocalSamplingClient):
        self.service, self.local = service, local
        self.model_path = local.model_path
        self._queue = service._new_queue(self, sampling=True)

    def get_tokenizer(self):
        return self.local.get_tokenizer()

    def get_base_model(self) -> str:
        return self.local.get_base_model()

    get_base_model_async = async_returning(get_base_model)

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
    ) -> LocalFuture:
        return self.service.submit(
            self._queue,
            "sample",
            lambda: self.local.sample(
                prompt,
                num_samples,
                sampling_params,
                include_prompt_logprobs,
                topk_prompt_logprobs,
                topk_sample_logprobs,
                target_prompt_logprobs,
                prompt_alt_tokens_k,
                prompt_logprobs_last_n,
            ),
        )

    sample_async = async_awaiting(sample)

    def compute_logprobs(self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None) -> LocalFuture:
        return self.service.submit(
            self._queue, "compute_logprobs", lambda: self.local.compute_logprobs(prompt, prompt_logprobs_last_n)
        )

    compute_logprobs_async = async_awaiting(compute_logprobs)


def _conforms(service: ClockedServiceClient, training: ClockedTrainingClient, sampling: ClockedSamplingClient) -> None:
    """Never called: mypy checks here that these classes offer every member of the Protocols, typed compatibly."""
    _service: protocol.ServiceClient = service
    _training: protocol.TrainingClient = training
    _sampling: protocol.SamplingClient = sampling
