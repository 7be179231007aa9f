"""The local backend: an in-process drop-in for the tinker SDK's ServiceClient, TrainingClient and SamplingClient.

One ModelWorker per base model owns the fp32 model wrapped by peft and a single thread that runs all work for that
model (forward/backward, optimizer steps, sampling, saving) strictly in submission order, so concurrent runs queue
instead of fighting for the CPU. Each training client is a named LoRA adapter with its own AdamW optimizer; each
sampling client is a frozen copy of adapter weights (or the base model) loaded into a sampler slot when it samples.
Checkpoints are folders on disk in PEFT's adapter format (adapter_model.safetensors + adapter_config.json) plus
optimizer.pt for full states and checkpoint.json (time, expiry from ttl_seconds, user metadata). Saving returns their
tinker:// names, the one path form the hosted service and `cookbook serve` return too; those resolve to the folders
(compat.resolve), and both forms are accepted wherever a path is.

The classes follow the installed SDK's signatures: create_* return futures of clients, requests return futures, the
`*_async` variants exist, and options the local backend cannot honour raise or warn once (compat.py holds the one
table of SDK methods it does not offer, with reasons). Not here: the loss math (losses.py), the decode loop
(sampler.py), the REST client (rest.py), anything about runs or storage.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tinker import types
from tinker.lib.public_interfaces.custom_loss import LossHandle

from cookbook_engine import compute_lease, device, models, priority, shutdown
from cookbook_engine.backends import compat, fast_ops, losses, packing, protocol, sampler, stability
from cookbook_engine.backends.protocol import ClientFuture, LocalFuture, async_awaiting, async_returning
from storage.statuses import SessionEnd

ATTN_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_MODULES = ["gate_proj", "up_proj", "down_proj"]
LORA_A_FIXED_MARKER = "lora_a_fixed"  # in a checkpoint folder: its adapter's A was fixed (fix_lora_a)
LORA_ALPHA = 32  # fixed, like the hosted service, so learning rates do not depend on the rank
SAMPLER_SLOT = "_sampler"
MAX_TOKENS_PER_MICROBATCH = 2048  # padded tokens per forward pass; bounds activation memory

_workers: dict[tuple[str, str, torch.dtype], ModelWorker] = {}  # (base model, device, dtype) -> its worker
device_choice = device.choose  # the constructor's `device` argument shadows the module inside __init__
_workers_lock = threading.Lock()
_ids = itertools.count(1)
_STOP = object()  # put on a worker's queue: finish what came before, then end the thread


def stop_workers(timeout_s: float) -> None:
    """Stop every model worker of this process (shutdown.py runs this at exit, after their clients stopped)."""
    with _workers_lock:
        workers = list(_workers.values())
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        worker.stop(max(0.5, deadline - time.monotonic()))


shutdown.register("model workers", shutdown.WORKERS, stop_workers)


def get_worker(base_model: str, device_name: str = "auto", dtype: str = "auto") -> ModelWorker:
    """The one worker for a base model on a device in a dtype in this process, created (and the model loaded) on
    first use. `device_name` is auto, cpu, cuda or mps, `dtype` auto, fp32 or bf16 (device.py decides what auto
    means here)."""
    name = models.canonical_name(base_model)
    choice = device.choose(device_name, dtype=dtype)  # a clear DeviceError now rather than on the worker thread
    key = (name, choice.device, choice.dtype)
    with _workers_lock:
        worker = _workers.get(key)
        if worker is not None and worker.load_error is not None:  # tried again: its cause may be gone (fixed setup)
            worker.stop(timeout_s=0)
            worker = None
        if worker is None:
            models.resolve(name)  # a clear error now rather than on the worker thread
            worker = _workers[key] = ModelWorker(name, choice)
        return worker


def worker_exists(base_model: str, device_name: str = "auto", dtype: str = "auto") -> bool:
    """Whether this process already holds `base_model` on that device in that dtype (a new run there shares its
    weights)."""
    choice = device.choose(device_name, dtype=dtype)
    with _workers_lock:
        return (models.canonical_name(base_model), choice.device, choice.dtype) in _workers


class ModelWorker:
    """A base model, its LoRA adapters and the one thread that runs every request on them, FIFO."""

    def __init__(self, base_model: str, choice: device.DeviceChoice | None = None):
        self.base_model = base_model
        self.choice = choice or device.choose("cpu")
        self.device = torch.device(self.choice.device)
        self._queue: queue.Queue = queue.Queue()
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self.model: Any = None  # the PeftModel, once loaded (Any: peft's adapter API is typed loosely)
        self.tokenizer = models.load_tokenizer(base_model)
        self.adapters: dict[str, dict] = {}  # adapter name -> lora settings
        self.fixed_a: set[str] = set()  # adapters whose A is fixed (fix_lora_a): their optimizer holds B alone
        # adapter -> (its B matrices, their M_P): after each optimizer step B <- B (I + lr x M)^-1 (decay_lora_b)
        self.b_decay: dict[str, tuple[list[torch.nn.Parameter], torch.Tensor]] = {}
        self._sampler_snapshot: object | None = None  # identity of the weights now in the sampler slot
        self.busy_seconds = 0.0
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"model-worker:{base_model}", daemon=True)
        priority.start(self._thread)  # a worker made for a page's chat still computes a run's steps

    @property
    def load_error(self) -> BaseException | None:
        """Why the model failed to load (every request then fails with it), or None."""
        return self._load_error

    def stop(self, timeout_s: float) -> None:
        """End the worker thread: the request in flight finishes, requests still queued are cancelled."""
        self._stopping = True
        while True:
            try:
                _, future = self._queue.get_nowait()
            except queue.Empty:
                break
            if future is not None:
                future.cancel()
        self._queue.put((_STOP, None))
        shutdown.join_thread(self._thread, timeout_s)

    # --- the queue ------------------------------------------------------------------------------------------
    def submit(self, fn: Callable[[], Any]) -> LocalFuture:
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self._stopping:
            future.cancel()  # the process is exiting (stop): nothing new runs
        else:
            self._queue.put((fn, future))
        return LocalFuture(future)

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.submit(fn).result()

    def pending(self) -> int:
        return self._queue.qsize()

    def _loop(self) -> None:
        try:
            self._load()
        except BaseException as exc:  # reported to every request instead of killing the thread silently
            self._load_error = exc
        while True:
            fn, future = self._queue.get()
            if fn is _STOP:
                return
            if not future.set_running_or_notify_cancel():
                continue
            if self._load_error is not None:
                future.set_exception(self._load_error)
                continue
            if isinstance(fn, SampleJob):
                self._run_samples([(fn, future), *self._take_queued_samples(fn.weights)])
                continue
            started = None
            try:
                with compute_lease.lease().hold():  # one process at a time computes on this machine
                    started = time.perf_counter()  # after the wait: what the work itself took
                    result = fn()
                    future.compute_seconds = time.perf_counter() - started
                future.set_result(result)
            except BaseException as exc:
                future.set_exception(exc)
            finally:
                if started is not None:
                    self.busy_seconds += time.perf_counter() - started

    def _take_queued_samples(self, weights: object) -> list[tuple[SampleJob, concurrent.futures.Future]]:
        """The sampling requests for the same weights queued right behind the one starting (the groups of an RL
        step, an evaluation's requests in flight), taken off the queue to decode in the same batch. Only those
        directly behind it: nothing overtakes other work."""
        taken = []
        with self._queue.mutex:
            pending = self._queue.queue
            while pending and isinstance(pending[0][0], SampleJob) and pending[0][0].weights is weights:
                job, future = pending.popleft()
                if future.set_running_or_notify_cancel():
                    taken.append((job, future))
        return taken

    def _run_samples(self, jobs: list[tuple[SampleJob, concurrent.futures.Future]]) -> None:
        """Several sampling requests on the same weights as one decode batch; each future gets its own responses."""
        started = None
        try:
            with compute_lease.lease().hold():
                started = time.perf_counter()
                results = jobs[0][0].decode([request for job, _ in jobs for request in job.requests])
                seconds = time.perf_counter() - started
        except BaseException as exc:
            if len(jobs) > 1:  # one bad request must not fail its batch-mates: each on its own
                for alone in jobs:
                    self._run_samples([alone])
                return
            jobs[0][1].set_exception(exc)
            return
        finally:
            if started is not None:
                self.busy_seconds += time.perf_counter() - started
        first = 0
        for job, future in jobs:
            future.compute_seconds = seconds  # type: ignore[attr-defined]  # the batch's: computed together
            future.set_result(job.responses(results[first : first + len(job.requests)]))
            first += len(job.requests)

    def _load(self) -> None:
        from peft import LoraConfig, get_peft_model

        torch.set_num_threads(max(1, torch.get_num_threads()))
        if self.choice.device == "cpu":
            fast_ops.use_calibrated_kernels()  # measured once per CPU model (calibration.py), then cached
        base = models.load_model(self.base_model, self.choice.dtype, self.choice.device)
        for param in base.parameters():
            param.requires_grad_(False)
        fast_ops.install_frozen_linears(base)  # before peft, so the LoRA matrices stay plain nn.Linear
        config = LoraConfig(
            r=8, lora_alpha=LORA_ALPHA, target_modules=ATTN_MODULES + MLP_MODULES, lora_dropout=0.0, bias="none"
        )
        self.model = get_peft_model(base, config, adapter_name=SAMPLER_SLOT)
        fast_ops.install_fast_lora(self.model)
        self.adapters[SAMPLER_SLOT] = {"rank": 8, "target_modules": ATTN_MODULES + MLP_MODULES}
        self.model.eval()
        self._loaded.set()

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 8192))

    # --- adapters (called on the worker thread only) ---------------------------------------------------------
    def add_adapter(self, name: str, rank: int, target_modules: list[str], seed: int | None) -> None:
        from peft import LoraConfig

        if seed is not None:
            torch.manual_seed(seed)
        config = LoraConfig(r=rank, lora_alpha=LORA_ALPHA, target_modules=target_modules, lora_dropout=0.0, bias="none")
        self._settle_active_adapter()
        self.model.add_adapter(name, config)
        fast_ops.install_fast_lora(self.model)  # layers this adapter wraps for the first time
        self.adapters[name] = {"rank": rank, "target_modules": list(target_modules)}

    def delete_adapter(self, name: str) -> None:
        if name in self.adapters and name != SAMPLER_SLOT:
            try:
                self.model.delete_adapter(name)
            finally:
                del self.adapters[name]
                self.fixed_a.discard(name)
                self.b_decay.pop(name, None)
                self._settle_active_adapter()

    def _settle_active_adapter(self) -> None:
        """Make the sampler slot the active adapter, on the model and every LoRA layer, whenever the active one is
        gone. peft picks a successor per layer when an active adapter is deleted, and in the full test suite a
        deleted name was once left active on the model, which made every later add_adapter raise KeyError."""
        from peft.tuners.tuners_utils import BaseTunerLayer

        known = set(self.model.peft_config)
        layers_active = {
            name
            for module in self.model.modules()
            if isinstance(module, BaseTunerLayer)
            for name in module.active_adapters
        }
        if not set(self.model.base_model.active_adapters) | layers_active <= known:
            # the sampler slot, or (while use_snapshot re-creates it at another rank) any adapter still there
            successor = SAMPLER_SLOT if SAMPLER_SLOT in known else next(iter(known), None)
            if successor is not None:
                self.model.set_adapter(successor)

    def adapter_params(self, name: str) -> list[torch.nn.Parameter]:
        """The adapter's trained parameters: A and B, or B alone where A is fixed (`fix_lora_a`)."""
        marker = f".lora_B.{name}." if name in self.fixed_a else f".{name}."
        return [p for n, p in self.model.named_parameters() if marker in n]

    def lora_a_params(self, name: str) -> list[torch.nn.Parameter]:
        marker = f".lora_A.{name}."
        return [p for n, p in self.model.named_parameters() if marker in n]

    def fix_lora_a(self, name: str, directions: dict[str, torch.Tensor] | None) -> int:
        """Fix adapter `name`'s A matrices (training/null_space.py): set to `directions` (keyed by the base model's
        projection names; None keeps the A it has, as a resumed run does) and left out of its optimizer from now on.
        Returns how many projections were fixed."""
        fixed = 0
        for module_name, module in self.model.named_modules():
            if hasattr(module, "lora_A") and name in module.lora_A:
                if directions is not None:
                    weight = module.lora_A[name].weight
                    wanted = directions[module_name.removeprefix("base_model.model.")]
                    if wanted.shape != weight.shape:
                        raise ValueError(
                            f"fix_lora_a: {module_name} wants A {tuple(weight.shape)}, got {tuple(wanted.shape)}"
                        )
                    weight.data.copy_(wanted.to(weight.dtype))
                fixed += 1
        self.fixed_a.add(name)
        return fixed

    def decay_lora_b(self, name: str, decay: dict[str, torch.Tensor]) -> int:
        """From now on, after each optimizer step of adapter `name` at rate lr, B <- B (I + lr x M)^-1 for each adapted
        projection, M = decay[projection] (keyed by the base model's projection names, rank x rank, symmetric and
        positive semi-definite: training/null_space.py `keep_decay_matrices`). That is decoupled weight decay on B
        weighted by M (B - lr x B @ M for small steps) taken as a proximal step, so it never overshoots zero however
        large lr x M is. Needs a fixed A (M is about A's directions). Returns how many projections decay."""
        if name not in self.fixed_a:
            raise ValueError("decay_lora_b: fix LoRA's A first (the decay is about A's fixed directions)")
        weights, matrices = [], []
        for module_name, module in self.model.named_modules():
            if hasattr(module, "lora_B") and name in module.lora_B:
                weight = module.lora_B[name].weight  # d_out x rank
                matrix = decay[module_name.removeprefix("base_model.model.")]
                rank = weight.shape[1]
                if matrix.shape != (rank, rank):
                    raise ValueError(f"decay_lora_b: {module_name} wants {rank} x {rank}, got {tuple(matrix.shape)}")
                weights.append(weight)
                matrices.append(matrix.to(device="cpu", dtype=torch.float64))  # solved on the CPU: MPS has no float64
        self.b_decay[name] = (weights, torch.stack(matrices)) if weights else ([], torch.zeros(0))
        return len(weights)

    def apply_b_decay(self, name: str, learning_rate: float) -> None:
        """One step of decay_lora_b's decay (no-op for an adapter without one)."""
        if name not in self.b_decay or not self.b_decay[name][0]:
            return
        weights, matrices_P = self.b_decay[name]
        eye = torch.eye(matrices_P.shape[-1], dtype=matrices_P.dtype)
        shrink_P = torch.linalg.inv(eye + learning_rate * matrices_P)  # one batched solve for every projection
        shrink_P = shrink_P.to(device=weights[0].device, dtype=weights[0].dtype)  # one copy to the model's device
        with torch.no_grad():
            for weight, shrink in zip(weights, shrink_P, strict=True):
                weight.copy_(weight @ shrink)

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        """The adapter's weights in PEFT's saved format (keys without the adapter name), copied."""
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.model, adapter_name=name)
        # peft also returns, unstripped ("lora_A.<other>.weight"), what a deleted adapter left in a layer
        return {k: v.detach().clone() for k, v in state.items() if not _other_adapters_key(k)}

    def load_adapter_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.model, state, adapter_name=name)
        unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
        if unexpected:
            raise ValueError(f"adapter weights do not fit this model: unexpected {unexpected[:3]}")

    def activate(self, name: str | None) -> None:
        if name is not None:
            self.model.set_adapter(name)  # peft marks every active LoRA matrix trainable again
            if name in self.fixed_a:
                for param in self.lora_a_params(name):
                    param.requires_grad_(False)  # so no backward pass computes a fixed A's gradient

    def use_snapshot(self, snapshot: WeightsSnapshot | None) -> None:
        """Put a sampling client's weights into the sampler slot (a no-op when they are already there)."""
        if snapshot is None:
            return
        if self._sampler_snapshot is snapshot:
            self.activate(SAMPLER_SLOT)
            return
        wanted = {"rank": snapshot.rank, "target_modules": snapshot.target_modules}
        if self.adapters.get(SAMPLER_SLOT) != wanted:
            self.model.delete_adapter(SAMPLER_SLOT)
            self.adapters.pop(SAMPLER_SLOT, None)
            self.add_adapter(SAMPLER_SLOT, snapshot.rank, snapshot.target_modules, seed=0)
        self.load_adapter_state(SAMPLER_SLOT, snapshot.state)
        self._sampler_snapshot = snapshot
        self.activate(SAMPLER_SLOT)


def _other_adapters_key(key: str) -> bool:
    """A state-dict key that still names an adapter (this adapter's keys come with the name stripped)."""
    for part in (".lora_A.", ".lora_B."):
        if part in key and key.split(part, 1)[1] != "weight":
            return True
    return False


class WeightsSnapshot:
    """Frozen LoRA weights that a sampling client samples from."""

    def __init__(self, state: dict[str, torch.Tensor], rank: int, target_modules: list[str]):
        self.state, self.rank, self.target_modules = state, rank, list(target_modules)


def save_adapter_folder(
    folder: Path, state: dict[str, torch.Tensor], base_model: str, rank: int, target_modules: list[str]
) -> None:
    """An adapter folder in PEFT's format, loadable with PeftModel.from_pretrained."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(folder / compat.ADAPTER_WEIGHTS))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": rank,
        "lora_alpha": LORA_ALPHA,
        "lora_dropout": 0.0,
        "target_modules": list(target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))


def read_adapter_folder(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """A checkpoint's adapter weights and PEFT config; `path` is its folder or its tinker:// path."""
    folder = compat.resolve(str(path))
    if not compat.holds_checkpoint(folder):
        raise FileNotFoundError(f"checkpoint {path}: no {compat.ADAPTER_WEIGHTS} in {folder}")
    config = json.loads((folder / "adapter_config.json").read_text())
    return load_file(str(folder / compat.ADAPTER_WEIGHTS)), config


def write_checkpoint_meta(folder: Path, ttl_seconds: int | None, user_metadata: dict | None) -> None:
    """checkpoint.json beside the adapter: when it was saved, when it expires (ttl_seconds), the user's metadata."""
    now = datetime.now(UTC)
    expires = now + timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None
    meta = {
        "time": now.isoformat(),
        "expires_at": expires.isoformat() if expires else None,
        "user_metadata": dict(user_metadata or {}),
    }
    (folder / compat.CHECKPOINT_META).write_text(json.dumps(meta))


def write_run_meta(model_id: str, meta: dict) -> None:
    """run.json of a training run (one training client): base model, LoRA settings, user metadata."""
    folder = compat.checkpoint_root() / model_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / compat.RUN_META).write_text(json.dumps(meta))


class LocalSamplingClient:
    """tinker.SamplingClient on this machine: the base model, or frozen LoRA weights, on the model worker."""

    def __init__(
        self,
        worker: ModelWorker,
        snapshot: WeightsSnapshot | None,
        model_path: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        session_id: str | None = None,
    ):
        self._worker, self._snapshot, self.model_path = worker, snapshot, model_path
        self.record_stability_info, self.session_id = record_stability_info, session_id
        _sampling_options_note(retry_config)
        self._handle = f"local-sampler:{uuid.uuid4().hex}"
        _samplers[self._handle] = self

    def get_tokenizer(self):
        return self._worker.tokenizer

    def get_base_model(self) -> str:
        return self._worker.base_model

    get_base_model_async = async_returning(get_base_model)

    def get_telemetry(self) -> None:
        """No telemetry is collected locally (the SDK returns None when it is off)."""
        return None

    def get_sampler_handle(self) -> str:
        """A string naming this sampler in this process; from_sampler_handle turns it back into the client."""
        return self._handle

    @staticmethod
    def from_sampler_handle(handle: str, *, api_key: str | None = None) -> LocalSamplingClient:
        if handle not in _samplers:
            raise ValueError(
                f"sampler handle {handle!r}: no sampling client with this handle in this process "
                "(local handles do not cross processes; use a model_path instead)"
            )
        return _samplers[handle]

    def create(self, *args: Any, **kwargs: Any):
        raise compat.unsupported("SamplingClient.create")

    def on_queue_state_change(self, queue_state: Any, queue_state_reason: str | None) -> None:
        raise compat.unsupported("SamplingClient.on_queue_state_change")

    def _run(self, fn):
        worker, snapshot = self._worker, self._snapshot

        def job():
            if snapshot is None:
                with worker.model.disable_adapter():
                    return fn()
            worker.use_snapshot(snapshot)
            return fn()

        return worker.submit(job)

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: object | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> LocalFuture:  # target_prompt_logprobs: refused
        return self.sample_as(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            prompt_logprobs_last_n,
            topk_prompt_logprobs=topk_prompt_logprobs,
            topk_sample_logprobs=topk_sample_logprobs,
            target_prompt_logprobs=target_prompt_logprobs,
            prompt_alt_tokens_k=prompt_alt_tokens_k,
        )

    sample_async = async_awaiting(sample)

    def sample_as(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        prompt_logprobs_last_n: int | None = None,
        *,
        sequence_ids: list[str] | None = None,
        record_stability_info: bool | None = None,
        topk_prompt_logprobs: int = 0,
        **refused: Any,
    ) -> LocalFuture:
        """sample, with the sequence ids chosen by the caller (cookbook serve fixes them when the request arrives)
        and record_stability_info per request (the SDK's SampleRequest field; None: this client's setting)."""
        _reject_unsupported(
            "sample",
            refused,
        )
        topk_prompt_logprobs = topk_prompt_logprobs or 0
        if topk_prompt_logprobs < 0:
            raise ValueError(f"topk_prompt_logprobs must be 0 or more, got {topk_prompt_logprobs}")
        _check_last_n(prompt_logprobs_last_n, include_prompt_logprobs or topk_prompt_logprobs > 0)
        tokens = prompt.to_ints()
        if sequence_ids is not None and len(sequence_ids) != num_samples:
            raise ValueError(f"sample: {len(sequence_ids)} sequence ids for {num_samples} samples")
        record = self.record_stability_info if record_stability_info is None else record_stability_info
        request = sampler.Request(tokens, num_samples, sampling_params, include_prompt_logprobs, topk_prompt_logprobs)
        return self._worker.submit(SampleJob(self, [request], prompt_logprobs_last_n, True, [sequence_ids], record))

    def sample_many(
        self, prompts: list[types.ModelInput], num_samples: int, sampling_params: types.SamplingParams
    ) -> LocalFuture:
        """A future of one SampleResponse per prompt, all decoded as one batch in one worker call (the local
        backend's own method; evaluators use it when the client has it). Each prompt's replies are those `sample`
        gives it alone with the same parameters and seed."""
        requests = [sampler.Request(p.to_ints(), num_samples, sampling_params) for p in prompts]
        job = SampleJob(self, requests, None, False, [None] * len(requests), self.record_stability_info)
        return self._worker.submit(job)

    sample_many_async = async_awaiting(sample_many)

    def compute_logprobs(self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None) -> LocalFuture:
        """Log-probabilities of the prompt's tokens (index 0 is None; with prompt_logprobs_last_n only the last n are
        scored, the others are None)."""
        _check_last_n(prompt_logprobs_last_n, True)
        tokens = prompt.to_ints()
        return self._run(lambda: _last_n(_prompt_logprobs(self._worker, tokens), prompt_logprobs_last_n))

    compute_logprobs_async = async_awaiting(compute_logprobs)


def _prompt_logprobs(worker: Any, tokens: list[int]) -> list[float | None]:
    """Each prompt token's log-probability under the weights in place (index 0: None), with the training forward's
    arithmetic: compute_logprobs returns these, and so does sample(include_prompt_logprobs=True), which is how the
    SDK asks for them over HTTP. The decoder's own prefill logits differ from them by rounding (up to ~0.05 nat a
    token in bf16), enough to break DPO's policy == reference at step 0 through `cookbook serve`."""
    if len(tokens) < 2:
        return [None] * len(tokens)
    model = worker.model
    with torch.inference_mode():
        if fast_ops.supports_packed(model):
            lp = fast_ops.packed_logprobs(model, [tokens[:-1]], [torch.tensor(tokens[1:])], [None])[0]
            return [None, *lp.tolist()]
        ids = torch.tensor([tokens], dtype=torch.long, device=worker.device)
        logits = model(input_ids=ids).logits
        return [None, *sampler.target_logprobs(logits[:, :-1].float(), ids[:, 1:])[0].cpu().tolist()]


def _prompt_topk(worker: Any, requests: list[sampler.Request]) -> list[list[list[tuple[int, float]] | None] | None]:
    """Per request, the k likeliest next tokens and their log-probs at each prompt position (index 0: None), with
    the same weights and fp32 head as _prompt_logprobs; None for a request that did not ask (k = 0). On the packed
    path the prompts that asked run as packed rows of up to PROMPT_PACK_TOKENS tokens (an anchor's few hundred chats
    in a handful of passes, not one pass each)."""
    results: list[list[list[tuple[int, float]] | None] | None] = [None] * len(requests)
    asked = [i for i, request in enumerate(requests) if request.topk_prompt_logprobs > 0]
    for i in asked:
        if len(requests[i].prompt_tokens) < 2:
            results[i] = [None] * len(requests[i].prompt_tokens)
    scored = [i for i in asked if results[i] is None]
    model = worker.model
    if not fast_ops.supports_packed(model):
        for i in scored:
            ids = torch.tensor([requests[i].prompt_tokens[:-1]], dtype=torch.long, device=worker.device)
            with torch.inference_mode():
                logits_T_V = model(input_ids=ids).logits[0].float()
            k = min(requests[i].topk_prompt_logprobs, logits_T_V.shape[-1])
            values_T_K, ids_T_K = torch.log_softmax(logits_T_V, dim=-1).topk(k, dim=-1)
            results[i] = _topk_rows(values_T_K, ids_T_K)
        return results
    for pack in _packs(scored, [len(requests[i].prompt_tokens) for i in scored]):
        k = max(requests[i].topk_prompt_logprobs for i in pack)
        scores = fast_ops.packed_topk(model, [requests[i].prompt_tokens[:-1] for i in pack], k)
        for i, (values_T_K, ids_T_K) in zip(pack, scores):
            own_k = requests[i].topk_prompt_logprobs
            results[i] = _topk_rows(values_T_K[:, :own_k], ids_T_K[:, :own_k])
    return results


PROMPT_PACK_TOKENS = 4096  # tokens per packed scoring pass: a few passes for an anchor, a bounded activation size


def _packs(indices: list[int], lengths: list[int]) -> list[list[int]]:
    """Consecutive indices grouped so that each group's lengths add up to at most PROMPT_PACK_TOKENS (a longer
    prompt alone)."""
    packs: list[list[int]] = []
    total = 0
    for index, length in zip(indices, lengths):
        if packs and total + length <= PROMPT_PACK_TOKENS:
            packs[-1].append(index)
            total += length
        else:
            packs.append([index])
            total = length
    return packs


def _topk_rows(values_T_K: torch.Tensor, ids_T_K: torch.Tensor) -> list[list[tuple[int, float]] | None]:
    return [None, *[list(zip(i, v)) for i, v in zip(ids_T_K.cpu().tolist(), values_T_K.cpu().tolist())]]


_samplers: weakref.WeakValueDictionary[str, LocalSamplingClient] = weakref.WeakValueDictionary()


class SampleJob:
    """A sampling request on the model worker's queue. The worker decodes the ones for the same weights that are
    queued together as one batch (sampler.sample_many), each prompt with its own seeded generator, so a request
    gets the tokens it would get alone (up to fp32 rounding, which can differ with the batch's shape)."""

    def __init__(
        self,
        client: LocalSamplingClient,
        requests: list[sampler.Request],
        last_n: int | None,
        one: bool,
        sequence_ids: list[list[str] | None],
        record: bool,
    ) -> None:
        """`one`: the result is the only response (sample), else the list (sample_many); `sequence_ids`: the
        caller's ids per request (None: new ones); `record`: keep stability records of the sequences."""
        self.client, self.requests, self.last_n, self.one = client, requests, last_n, one
        self.sequence_ids, self.record = sequence_ids, record
        # what the weights are: the snapshot object, or the base model (BASE_WEIGHTS)
        self.weights = client._snapshot if client._snapshot is not None else sampler.BASE_WEIGHTS

    def __call__(self) -> Any:  # alone (the worker normally batches it with its neighbours: _run_samples)
        return self.responses(self.decode(self.requests))

    def decode(self, requests: list[sampler.Request]) -> list:
        worker, snapshot = self.client._worker, self.client._snapshot

        def run():
            results = sampler.sample_many(
                worker.model, worker.tokenizer, requests, worker.max_context, weights_key=self.weights
            )
            topk = _prompt_topk(worker, requests)
            return [  # prompt log-probs as compute_logprobs gives them (_prompt_logprobs), not the decoder's
                (rows, _prompt_logprobs(worker, request.prompt_tokens) if request.include_prompt_logprobs else lp, top)
                for request, (rows, lp), top in zip(requests, results, topk)
            ]

        if snapshot is None:
            with worker.model.disable_adapter():
                return run()
        worker.use_snapshot(snapshot)
        return run()

    def responses(self, results: list) -> Any:
        responses = []
        for request, given_ids, (rows, prompt_lp, prompt_topk) in zip(self.requests, self.sequence_ids, results):
            ids = given_ids or [uuid.uuid4().hex for _ in rows]
            sequences = [
                types.SampledSequence(
                    stop_reason=row.stop_reason,
                    sequence_id=sequence_id,
                    _tokens_list=row.tokens,
                    _logprobs_list=row.logprobs,
                )
                for row, sequence_id in zip(rows, ids)
            ]
            if self.record:
                for seq in sequences:
                    record = stability.SequenceRecord(
                        self.client.session_id, request.prompt_tokens, seq.tokens, list(seq.logprobs or [])
                    )
                    stability.RECORDS.add(seq.sequence_id, record)
            responses.append(
                types.SampleResponse(
                    sequences=sequences,
                    _prompt_logprobs_list=_last_n(prompt_lp, self.last_n),
                    _topk_prompt_logprobs_list=_last_n(prompt_topk, self.last_n),
                )
            )
        return responses[0] if self.one else responses


def _check_last_n(last_n: int | None, include_prompt_logprobs: bool) -> None:
    if last_n is None:
        return
    if last_n < 1:
        raise ValueError(f"prompt_logprobs_last_n must be 1 or greater, got {last_n}")
    if not include_prompt_logprobs:
        raise ValueError("prompt_logprobs_last_n applies to prompt logprobs; set include_prompt_logprobs")


def _last_n(logprobs: list | None, last_n: int | None) -> list | None:
    if logprobs is None or last_n is None:
        return logprobs
    keep = max(0, len(logprobs) - last_n)
    return [None] * keep + list(logprobs[keep:])


def _sampling_options_note(retry_config: Any) -> None:
    if retry_config is not None:
        compat.warn_once(
            "retry_config",
            "retry_config has no effect on the local backend: requests run in this process and are never retried.",
        )


class LocalTrainingClient:
    """tinker.TrainingClient on this machine: one LoRA adapter with its own AdamW on the base model's worker.
    Every request runs on the worker in submission order and returns a future at once."""

    LOCAL_CHECKPOINTS = True  # its tinker:// paths name folders on this machine (compat.resolve)

    def __init__(
        self,
        worker: ModelWorker,
        adapter: str,
        rank: int,
        target_modules: list[str],
        service: LocalServiceClient | None = None,
    ):
        self._worker, self.adapter, self.rank, self.target_modules = worker, adapter, rank, target_modules
        self.model_id = adapter
        self._service = service
        self._optimizer: torch.optim.AdamW | None = None

    # --- info -----------------------------------------------------------------------------------------------
    def get_tokenizer(self):
        return self._worker.tokenizer

    def get_info(self) -> types.GetInfoResponse:
        return types.GetInfoResponse(
            model_id=self.model_id,
            # tokenizer_id: where the SDK's own get_tokenizer() loads it from (AutoTokenizer.from_pretrained): the
            # model's local folder for the default and folder models, so it works offline over HTTP too
            model_data=types.ModelData(
                model_name=self._worker.base_model, tokenizer_id=models.resolve(self._worker.base_model).location
            ),
            optimizer_config=types.AdamOptimizerConfig(),
            is_lora=True,
            lora_rank=self.rank,
            model_name=self._worker.base_model,
        )

    get_info_async = async_returning(get_info)

    def get_telemetry(self) -> None:
        """No telemetry is collected locally (the SDK returns None when it is off)."""
        return None

    def get_console_url(self) -> str:
        raise compat.unsupported("TrainingClient.get_console_url")

    def _submit(self, fn: Callable[[], Any]) -> LocalFuture:
        if self._service is not None and self._service.closed:
            raise RuntimeError(f"training client {self.model_id}: its service client was closed")
        return self._worker.submit(fn)

    # --- forward / backward ---------------------------------------------------------------------------------
    def _logprobs_D(
        self,
        data: list[types.Datum],
        with_grad: bool,
        on_microbatch: Callable[[list[int], list[torch.Tensor]], None] | None = None,
        grad_rows_D: list[torch.Tensor] | None = None,
        shared_D: list[int] | None = None,
    ) -> list[torch.Tensor]:
        """Per-datum log p(target_tokens) under the current adapter, cut into micro-batches of at most
        MAX_TOKENS_PER_MICROBATCH tokens; `on_microbatch` (indices, logprobs) lets the caller run backward per
        micro-batch so activations of only one micro-batch are alive at a time. `grad_rows_D[i]` (bool per position)
        says where datum i's log-probs need a gradient (None: everywhere); the others come out without one, which
        the packed path uses to skip their LM-head backward. `shared_D[i]`: how many leading positions of datum i
        the loss does not use, which the packed path runs once for data that begin with the same tokens there."""
        if fast_ops.supports_packed(self._worker.model):
            return self._logprobs_packed(data, with_grad, on_microbatch, grad_rows_D, shared_D)
        return self._logprobs_padded(data, with_grad, on_microbatch)

    def _logprobs_packed(self, data, with_grad, on_microbatch, grad_rows_D, shared_D=None) -> list[torch.Tensor]:
        """No padding: each micro-batch is one row of its data's tokens (a prompt that several data begin with held
        once: packing.py), attention runs per datum (fast_ops)."""
        all_inputs = [datum.model_input.to_ints() for datum in data]
        logprobs_D: list[torch.Tensor | None] = [None] * len(data)
        start = 0
        while start < len(data):
            end, total, prefixes = start, 0, set()
            while end < len(data):
                tokens = all_inputs[end]
                key = packing.shared_key(tokens, shared_D[end] if shared_D else 0)
                cost = len(tokens) - len(key) if key is not None and key in prefixes else len(tokens)  # prompt in row
                if end > start and total + cost > MAX_TOKENS_PER_MICROBATCH:
                    break
                total, end = total + cost, end + 1
                if key is not None:
                    prefixes.add(key)
            chunk = list(range(start, end))
            start = end
            inputs = [all_inputs[i] for i in chunk]
            targets = [data[i].loss_fn_inputs["target_tokens"].to_torch() for i in chunk]
            grad_rows: list[torch.Tensor | None]
            if not with_grad:
                grad_rows = [None] * len(chunk)
            elif grad_rows_D is None:
                grad_rows = [torch.ones(len(tokens), dtype=torch.bool) for tokens in inputs]
            else:
                grad_rows = [grad_rows_D[i] for i in chunk]
            with torch.set_grad_enabled(with_grad):
                shared = [shared_D[i] for i in chunk] if shared_D else None
                pieces = fast_ops.packed_logprobs(self._worker.model, inputs, targets, grad_rows, shared)
                if on_microbatch is not None:
                    on_microbatch(chunk, pieces)
            for i, piece in zip(chunk, pieces):
                logprobs_D[i] = piece.detach()
        return logprobs_D  # type: ignore[return-value]

    def _logprobs_padded(self, data, with_grad, on_microbatch) -> list[torch.Tensor]:
        """The straightforward path (any architecture): data sorted by length, cut into micro-batches of similar
        lengths, padded, full logits. Also the reference that tests/test_fast_paths.py compares the packed path to."""
        model = self._worker.model
        order = sorted(range(len(data)), key=lambda i: data[i].model_input.length, reverse=True)
        logprobs_D: list[torch.Tensor | None] = [None] * len(data)
        start = 0
        while start < len(order):
            longest = data[order[start]].model_input.length
            size = max(1, MAX_TOKENS_PER_MICROBATCH // max(1, longest))
            chunk = order[start : start + size]
            start += size
            lengths = [data[i].model_input.length for i in chunk]
            targets = [data[i].loss_fn_inputs["target_tokens"].to_torch().long() for i in chunk]
            width = max(t.shape[1] if t.dim() == 2 else 0 for t in targets)  # top-K targets: K columns each
            input_B_T = torch.zeros(len(chunk), longest, dtype=torch.long)
            target_B_T = torch.zeros((len(chunk), longest, width) if width else (len(chunk), longest), dtype=torch.long)
            mask_B_T = torch.zeros(len(chunk), longest, dtype=torch.long)
            for b, i in enumerate(chunk):
                n = lengths[b]
                input_B_T[b, :n] = torch.tensor(data[i].model_input.to_ints())
                target_B_T[b, :n] = fast_ops.widened(targets[b], width) if width else targets[b]
                mask_B_T[b, :n] = 1
            on = self._worker.device  # inputs go to the model; log-probs come back to the CPU for the loss math
            with torch.set_grad_enabled(with_grad):
                logits = model(input_ids=input_B_T.to(on), attention_mask=mask_B_T.to(on)).logits
                lp_B_T = sampler.target_logprobs(logits.float(), target_B_T.to(on)).cpu()
                pieces = [lp_B_T[b, : lengths[b]] for b in range(len(chunk))]
                if width:  # back to each datum's own shape
                    pieces = [p[:, : t.shape[1]] if t.dim() == 2 else p[:, 0] for p, t in zip(pieces, targets)]
                if on_microbatch is not None:
                    on_microbatch(chunk, pieces)
            for b, i in enumerate(chunk):
                logprobs_D[i] = pieces[b].detach()
        return logprobs_D  # type: ignore[return-value]

    def _check(self, data: list[types.Datum], loss_fn: str | None) -> None:
        if not data:
            raise ValueError("forward_backward: no data")
        for index, datum in enumerate(data):
            n = datum.model_input.length
            if n == 0:
                raise ValueError(f"datum {index}: empty model_input")
            if n > self._worker.max_context:
                raise ValueError(f"datum {index}: {n} tokens exceed the model's context of {self._worker.max_context}")
            if "target_tokens" not in datum.loss_fn_inputs:
                raise ValueError(f"datum {index}: loss_fn_inputs needs 'target_tokens'")
            if loss_fn is not None:
                losses.check_inputs(loss_fn, index, datum.loss_fn_inputs, n)

    def _forward(self, data, loss_fn, loss_fn_config, backward: bool) -> types.ForwardBackwardOutput:
        self._check(data, loss_fn)
        self._worker.activate(self.adapter)
        total = {"loss": 0.0}
        inputs_D = [
            stability.loss_inputs(datum, i)
            if loss_fn == "stable_reinforce"
            else {k: v.to_torch() for k, v in datum.loss_fn_inputs.items()}
            for i, datum in enumerate(data)
        ]

        def on_microbatch(indices, logprobs):
            loss = torch.zeros(())  # a 0-d tensor adds to log-probs on any device
            for i, lp in zip(indices, logprobs):
                loss = loss + losses.datum_loss(loss_fn, lp, inputs_D[i], loss_fn_config)
            if backward and loss.requires_grad:  # not when no position of this micro-batch has a loss weight
                loss.backward()
            total["loss"] += float(loss.detach())

        used_rows_D = [_grad_rows(loss_fn, datum, loss_fn_config) for datum in data]
        shared_D = [_unused_prefix(rows_T) for rows_T in used_rows_D]  # a prompt that data share runs once
        if backward:
            self._worker.model.train()
        try:
            logprobs_D = self._logprobs_D(
                data,
                with_grad=backward,
                on_microbatch=on_microbatch,
                grad_rows_D=used_rows_D if backward else None,
                shared_D=shared_D,
            )
        finally:
            self._worker.model.eval()
        outputs = [{"logprobs": types.TensorData.from_torch(lp.float())} for lp in logprobs_D]
        return types.ForwardBackwardOutput(
            loss_fn_output_type="TorchLossReturn", loss_fn_outputs=outputs, metrics={"loss:sum": total["loss"]}
        )

    def forward(
        self, data: list[types.Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None
    ) -> LocalFuture:
        return self._submit(lambda: self._forward(data, loss_fn, loss_fn_config, backward=False))

    forward_async = async_returning(forward)

    def forward_backward(
        self, data: list[types.Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict | None = None
    ) -> LocalFuture:
        return self._submit(lambda: self._forward(data, loss_fn, loss_fn_config, backward=True))

    forward_backward_async = async_returning(forward_backward)

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: Callable | Any, *, loss_type_input: str | None = None
    ) -> LocalFuture:
        """loss_fn is a callable (data, logprobs_list) -> (loss, metrics), with gradients flowing through
        logprobs_list, or a LossHandle from create_custom_loss (run per datum and summed)."""
        if loss_type_input not in (None, "logprobs"):
            raise ValueError(
                f"forward_backward_custom: loss_type_input must be None or 'logprobs', got {loss_type_input!r}"
            )
        if isinstance(loss_fn, LossHandle):
            loss_fn = _per_datum_loss(loss_fn)
        return self._submit(lambda: self._forward_custom(data, loss_fn))

    forward_backward_custom_async = async_returning(forward_backward_custom)

    def _forward_custom(self, data: list[types.Datum], loss_fn: Callable) -> types.ForwardBackwardOutput:
        self._check(data, None)
        self._worker.activate(self.adapter)
        self._worker.model.train()
        try:
            # All data in one graph: a custom loss may couple data (DPO pairs chosen with rejected).
            logprobs_D: list = [None] * len(data)

            def keep(indices, pieces):
                for i, lp in zip(indices, pieces):
                    logprobs_D[i] = lp

            with torch.enable_grad():
                self._logprobs_D(data, with_grad=True, on_microbatch=keep)
                loss, metrics = loss_fn(data, logprobs_D)
                loss.backward()
        finally:
            self._worker.model.eval()
        outputs = [{"logprobs": types.TensorData.from_torch(lp.detach().float())} for lp in logprobs_D]
        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        metrics.setdefault("loss:sum", float(loss.detach()))
        return types.ForwardBackwardOutput(
            loss_fn_output_type="TorchLossReturn", loss_fn_outputs=outputs, metrics=metrics
        )

    # --- fixed A (local only: training/null_space.py) -----------------------------------------------------------
    def fix_lora_a(self, directions: dict[str, torch.Tensor] | None) -> LocalFuture:
        """Not in the tinker SDK: set this adapter's A matrices to `directions` ({base projection name: rank x d_in};
        None keeps them) and train B alone from now on. Before the first optim_step only. The future's result is the
        number of projections fixed."""
        return self._submit(lambda: self._fix_lora_a(directions))

    def _fix_lora_a(self, directions: dict[str, torch.Tensor] | None) -> int:
        if self._optimizer is not None and self.adapter not in self._worker.fixed_a:
            raise ValueError("fix_lora_a: this client has taken optimizer steps with A trained; fix A before the first")
        return self._worker.fix_lora_a(self.adapter, directions)

    def decay_lora_b(self, decay: dict[str, torch.Tensor]) -> LocalFuture:
        """Not in the tinker SDK: after each optim_step from now on, B <- B (I + lr x decay[projection])^-1, about
        B - lr x B @ decay[projection] (training/null_space.py `keep_decay_matrices`: B shrinks fastest where ordinary
        chats read A's fixed directions). A must be fixed first. The future's result is the number of projections
        that decay."""
        return self._submit(lambda: self._worker.decay_lora_b(self.adapter, decay))

    # --- optimizer ------------------------------------------------------------------------------------------
    def _ensure_optimizer(self) -> torch.optim.AdamW:
        if self._optimizer is None:
            self._optimizer = torch.optim.AdamW(
                self._worker.adapter_params(self.adapter), lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0
            )
        return self._optimizer

    def optim_step(
        self, optim_params: types.OptimParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> LocalFuture:
        adam_params = _adam_params(optim_params, adam_params)

        def fn():
            if adam_params.learning_rate < 0:
                raise ValueError(f"optim_step: learning_rate must be >= 0, got {adam_params.learning_rate}")
            optimizer = self._ensure_optimizer()
            params = self._worker.adapter_params(self.adapter)
            grads = [p.grad for p in params if p.grad is not None]
            grad_norm = (
                float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
                if grads
                else 0.0
            )
            if adam_params.grad_clip_norm > 0 and grads:
                torch.nn.utils.clip_grad_norm_(params, adam_params.grad_clip_norm)
            for group in optimizer.param_groups:
                group["lr"] = adam_params.learning_rate
                group["betas"] = (adam_params.beta1, adam_params.beta2)
                group["eps"] = adam_params.eps
                group["weight_decay"] = adam_params.weight_decay
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            self._worker.apply_b_decay(self.adapter, adam_params.learning_rate)
            return types.OptimStepResponse(metrics={"grad_norm": grad_norm})

        return self._submit(fn)

    optim_step_async = async_returning(optim_step)

    # --- checkpoints ----------------------------------------------------------------------------------------
    def _folder(self, kind: str, name: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name)) or "checkpoint"
        compat.check_name("checkpoint", safe)  # never '.', '..' or a hidden name: one folder inside kind/
        return compat.checkpoint_root() / self.model_id / kind / safe

    def _save(
        self,
        kind: str,
        name: str,
        with_optimizer: bool,
        ttl_seconds: int | None = None,
        user_metadata: dict | None = None,
        overwrite: bool = True,
    ) -> str:
        folder = self._folder(kind, name)
        if not overwrite and compat.holds_checkpoint(folder):
            raise FileExistsError(f"checkpoint {name!r} of {self.model_id} exists; pass overwrite=True to replace it")
        save_adapter_folder(
            folder, self._worker.adapter_state(self.adapter), self._worker.base_model, self.rank, self.target_modules
        )
        if with_optimizer:
            torch.save(self._ensure_optimizer().state_dict(), folder / "optimizer.pt")
        marker = folder / LORA_A_FIXED_MARKER  # so a client loading it keeps A fixed (its optimizer holds B alone)
        if self.adapter in self._worker.fixed_a:
            marker.write_text("LoRA's A matrices were fixed (lora_a=null_space); only B trains.\n")
        else:
            marker.unlink(missing_ok=True)
        write_checkpoint_meta(folder, ttl_seconds, user_metadata)
        return compat.tinker_path(self.model_id, compat.KIND_OF_FOLDER[kind], folder.name)

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalFuture:
        """Weights and optimizer state for resuming. The path is its tinker:// name
        (tinker://<model_id>/weights/<name>), as the hosted service and `cookbook serve` return; its folder
        (compat.resolve) is accepted everywhere a path is too."""
        return self._submit(
            lambda: types.SaveWeightsResponse(
                path=self._save("state", name, True, ttl_seconds, user_metadata, overwrite)
            )
        )

    save_state_async = async_returning(save_state)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture:
        return self._submit(
            lambda: types.SaveWeightsForSamplerResponse(
                path=self._save("sampler", name, False, ttl_seconds, user_metadata)
            )
        )

    save_weights_for_sampler_async = async_returning(save_weights_for_sampler)

    def save_weights_external(
        self, name: str, ttl_seconds: int | None = None, age_encryption_recipients: list[str] | None = None
    ):
        raise compat.unsupported("TrainingClient.save_weights_external")

    async def save_weights_external_async(
        self, name: str, ttl_seconds: int | None = None, age_encryption_recipients: list[str] | None = None
    ):
        raise compat.unsupported("TrainingClient.save_weights_external_async")

    def _load(self, path: str, with_optimizer: bool) -> types.LoadWeightsResponse:
        state, config = read_adapter_folder(path)
        if int(config.get("r", self.rank)) != self.rank:
            raise ValueError(f"checkpoint {path}: LoRA rank {config.get('r')} differs from this client's {self.rank}")
        self._worker.load_adapter_state(self.adapter, state)
        if (compat.resolve(path) / LORA_A_FIXED_MARKER).exists():
            self._fix_lora_a(None)
        if with_optimizer:
            optimizer_file = compat.resolve(path) / "optimizer.pt"
            if not optimizer_file.exists():
                raise FileNotFoundError(f"checkpoint {path}: no optimizer state (saved for sampling only?)")
            self._ensure_optimizer().load_state_dict(torch.load(optimizer_file, weights_only=True))
        return types.LoadWeightsResponse(path=path, model_id=self.model_id)

    def load_state(self, path: str, weights_access_token: str | None = None) -> LocalFuture:
        _no_access_token(weights_access_token)
        return self._submit(lambda: self._load(path, False))

    load_state_async = async_returning(load_state)

    def load_state_with_optimizer(self, path: str, weights_access_token: str | None = None) -> LocalFuture:
        _no_access_token(weights_access_token)
        return self._submit(lambda: self._load(path, True))

    load_state_with_optimizer_async = async_returning(load_state_with_optimizer)

    # --- sampling clients -----------------------------------------------------------------------------------
    def _snapshot(self) -> WeightsSnapshot:
        return WeightsSnapshot(self._worker.adapter_state(self.adapter), self.rank, self.target_modules)

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> ClientFuture:
        """A future of a sampling client on the weights as they are after every request submitted before this one
        (and, with a name, saved as sampler weights)."""
        make = self.sampling_client_maker(name, retry_config, record_stability_info, kind)
        return ClientFuture(self._submit(make).future())

    def sampling_client_maker(
        self, name: str | None, retry_config: Any, record_stability_info: bool, kind: str
    ) -> Callable[[], LocalSamplingClient]:
        """What save_weights_and_get_sampling_client runs on the worker: a sampling client on the adapter's weights
        as they are when it runs (saved as sampler weights under `name`, if given). The clocked simulator queues it
        at its own ticks."""
        if kind != "snapshot":
            raise NotImplementedError(
                f"save_weights_and_get_sampling_client(kind={kind!r}): the local backend "
                "gives snapshot samplers only (their weights never change)"
            )

        def make() -> LocalSamplingClient:
            path = self._save("sampler", name, False) if name else None
            session_id = self._service.session_id if self._service is not None else None
            return LocalSamplingClient(
                self._worker, self._snapshot(), path, retry_config, record_stability_info, session_id
            )

        return make

    save_weights_and_get_sampling_client_async = async_awaiting(save_weights_and_get_sampling_client)

    def create_sampling_client(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> ClientFuture:
        service = self._service if self._service is not None else LocalServiceClient()
        return service.create_sampling_client(
            model_path, retry_config=retry_config, record_stability_info=record_stability_info
        )

    create_sampling_client_async = async_awaiting(create_sampling_client)

    def close(self) -> None:
        """Free this client's adapter on the worker (its saved checkpoints stay on disk)."""
        self._worker.submit(lambda: self._worker.delete_adapter(self.adapter))


class LocalServiceClient:
    """Drop-in for tinker.ServiceClient on this machine: same constructor, context manager, and create_* methods
    that return futures of clients (the `*_async` variants return the clients). One instance is one session; its
    `session_id`, `user_metadata`, `display_name` and `project_id` are kept for whoever records sessions
    (`cookbook serve` turns each session into a studio run)."""

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        display_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        default_headers_overrides: Any = None,
        device: str = "auto",
        dtype: str = "auto",
        **kwargs: Any,
    ):
        self.user_metadata, self.project_id, self.display_name = dict(user_metadata or {}), project_id, display_name
        self.device_name = device  # where this session's models compute (device.py: auto, cpu, cuda, mps)
        self.dtype_name = dtype  # and in which precision (device.py: auto, fp32, bf16)
        self.compute = device_choice(device, dtype=dtype)  # refuse a missing device now, with the reason
        self.session_id = f"local-session-{uuid.uuid4().hex[:12]}"
        self.closed = False
        self._training_clients: list[LocalTrainingClient] = []
        ignored = [
            k
            for k, v in {
                "base_url": base_url,
                "api_key": api_key,
                "default_headers_overrides": default_headers_overrides,
                **kwargs,
            }.items()
            if v is not None
        ]
        if ignored:
            compat.warn_once(
                f"service:{','.join(sorted(ignored))}",
                f"LocalServiceClient runs in this process: {', '.join(sorted(ignored))} not used (to "
                "go through HTTP, run `cookbook serve` and use tinker.ServiceClient).",
            )
        from cookbook_engine.backends import rest

        rest.sweep_expired()

    # --- session ----------------------------------------------------------------------------------------------
    def __enter__(self) -> LocalServiceClient:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(
            SessionEnd.ERRORED
            if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt)
            else SessionEnd.INTERRUPTED
            if exc_type is not None
            else SessionEnd.SUCCESS
        )

    def close(self, status: str = SessionEnd.SUCCESS, detail: str | None = None) -> LocalFuture:
        """End the session: free its training clients' adapters (their checkpoints stay on disk); later requests
        on its clients fail with a clear error."""
        if status not in tuple(SessionEnd):
            raise ValueError(f"close: status must be {', '.join(SessionEnd)}, got {status!r}")
        if not self.closed:
            self.closed = True
            self.close_status, self.close_detail = status, detail
            for client in self._training_clients:
                client.close()
            stability.RECORDS.forget_session(self.session_id)
        return LocalFuture.completed(None)

    def get_telemetry(self) -> None:
        """No telemetry is collected locally (the SDK returns None when it is off)."""
        return None

    def get_console_url(self) -> str:
        raise compat.unsupported("ServiceClient.get_console_url")

    @property
    def holder(self):
        raise compat.unsupported("ServiceClient.holder")

    def copy_weights(self, path: str, *, ttl_seconds: int | None = None, weights_access_token: str | None = None):
        raise compat.unsupported("ServiceClient.copy_weights")

    def create_rest_client(self):
        from cookbook_engine.backends.rest import LocalRestClient

        return LocalRestClient()

    def create_custom_loss(self, fn: Callable, input_ranks: Any) -> LocalFuture:
        """Trace a per-datum loss with the SDK's own tracer; the handle runs in forward_backward_custom."""
        from tinker.lib.public_interfaces.custom_loss import trace_loss

        return LocalFuture.completed(trace_loss(fn, input_ranks, self.session_id))

    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        return types.GetServerCapabilitiesResponse(
            supported_models=[types.SupportedModel(model_name=models.DEFAULT_MODEL)]
        )

    get_server_capabilities_async = async_returning(get_server_capabilities)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"service client {self.session_id} is closed")

    # --- training clients -------------------------------------------------------------------------------------
    def _new_training_client(
        self,
        base_model: str,
        rank: int,
        seed: int | None,
        train_mlp: bool,
        train_attn: bool,
        user_metadata: dict | None,
    ) -> LocalTrainingClient:
        self._check_open()
        if rank < 1:
            raise ValueError(f"LoRA rank must be at least 1, got {rank}")
        targets = (ATTN_MODULES if train_attn else []) + (MLP_MODULES if train_mlp else [])
        if not targets:
            raise ValueError("LoRA needs train_attn or train_mlp")
        worker = get_worker(base_model, self.device_name, self.dtype_name)
        adapter = f"run{next(_ids)}_{uuid.uuid4().hex[:8]}"
        worker.call(lambda: worker.add_adapter(adapter, rank, targets, seed))
        write_run_meta(
            adapter,
            {
                "base_model": worker.base_model,
                "lora_rank": rank,
                "train_mlp": train_mlp,
                "train_attn": train_attn,
                "train_unembed": False,
                "session_id": self.session_id,
                "user_metadata": {**self.user_metadata, **(user_metadata or {})},
                "created": datetime.now(UTC).isoformat(),
            },
        )
        client = LocalTrainingClient(worker, adapter, rank, targets, self)
        self._training_clients.append(client)
        return client

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
        """A future of a training client. The local backend adapts the attention and MLP projections; the
        unembedding is not adapted (train_unembed=True, the SDK's default, warns once)."""
        _check_optimizer(optimizer)
        if train_unembed:
            compat.warn_once(
                "train_unembed",
                "train_unembed=True: the local backend does not put LoRA on the "
                "unembedding (tied to the embeddings in the default model); only the "
                "attention and MLP projections are trained (as train_attn and train_mlp say).",
            )
        return _client_future(
            lambda: self._new_training_client(base_model, rank, seed, train_mlp, train_attn, user_metadata)
        )

    create_lora_training_client_async = async_awaiting(create_lora_training_client)

    def _from_state(
        self, path: str, with_optimizer: bool, base_model: str | None, user_metadata: dict | None
    ) -> LocalTrainingClient:
        _, config = read_adapter_folder(path)
        if base_model and models.canonical_name(base_model) != models.canonical_name(config["base_model_name_or_path"]):
            raise ValueError(f"checkpoint {path} was trained on {config['base_model_name_or_path']}, not {base_model}")
        targets = config["target_modules"]
        client = self._new_training_client(
            config["base_model_name_or_path"],
            int(config["r"]),
            None,
            any(t in MLP_MODULES for t in targets),
            any(t in ATTN_MODULES for t in targets),
            user_metadata,
        )
        (client.load_state_with_optimizer(path) if with_optimizer else client.load_state(path)).result()
        return client

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any = None,
    ) -> ClientFuture:
        _no_access_token(weights_access_token)
        _check_optimizer(optimizer)
        return _client_future(lambda: self._from_state(path, False, base_model, user_metadata))

    create_training_client_from_state_async = async_awaiting(create_training_client_from_state)

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> ClientFuture:
        _no_access_token(weights_access_token)
        return _client_future(lambda: self._from_state(path, True, base_model, user_metadata))

    create_training_client_from_state_with_optimizer_async = async_awaiting(
        create_training_client_from_state_with_optimizer
    )

    # --- sampling clients -------------------------------------------------------------------------------------
    def _new_sampling_client(
        self, model_path: str | None, base_model: str | None, retry_config: Any, record_stability_info: bool
    ) -> LocalSamplingClient:
        self._check_open()
        if model_path:
            state, config = read_adapter_folder(model_path)
            worker = get_worker(config["base_model_name_or_path"], self.device_name, self.dtype_name)
            snapshot = WeightsSnapshot(state, int(config["r"]), config["target_modules"])
            return LocalSamplingClient(
                worker, snapshot, model_path, retry_config, record_stability_info, self.session_id
            )
        if not base_model:
            raise ValueError("create_sampling_client needs model_path or base_model")
        return LocalSamplingClient(
            get_worker(base_model, self.device_name, self.dtype_name),
            None,
            None,
            retry_config,
            record_stability_info,
            self.session_id,
        )

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> ClientFuture:
        return _client_future(
            lambda: self._new_sampling_client(model_path, base_model, retry_config, record_stability_info)
        )

    create_sampling_client_async = async_awaiting(create_sampling_client)


_creator = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="client-create")


def _client_future(make: Callable[[], Any]) -> ClientFuture:
    """Build a client on a helper thread (it may wait for the model to load) and return its future at once, the
    SDK's return type; errors come out of .result() / await, as with the SDK."""
    return ClientFuture(priority.at_process_priority(lambda: _creator.submit(make)))  # its threads too


def _check_optimizer(optimizer: Any) -> None:
    if optimizer is not None and not isinstance(optimizer, types.AdamOptimizerConfig):
        raise NotImplementedError(
            f"optimizer={type(optimizer).__name__}: the local backend trains with AdamW only (AdamOptimizerConfig)"
        )


def _adam_params(optim_params: Any, adam_params: Any) -> types.AdamParams:
    if optim_params is not None and adam_params is not None:
        raise TypeError("optim_step: pass optim_params or adam_params, not both")
    params = optim_params if optim_params is not None else adam_params
    if params is None:
        raise TypeError("optim_step: needs optim_params (an AdamParams)")
    if not isinstance(params, types.AdamParams):
        raise NotImplementedError(
            f"optim_step({type(params).__name__}): the local backend runs AdamW only; pass tinker.AdamParams"
        )
    return params


def _no_access_token(token: str | None) -> None:
    if token is not None:
        raise NotImplementedError(
            "weights_access_token: local checkpoints need no access token; other users' "
            "hosted checkpoints cannot be loaded here"
        )


def _per_datum_loss(handle: LossHandle) -> Callable:
    """A LossHandle's traced per-datum loss as a (data, logprobs_list) -> (loss, metrics) callable: the loss is the
    sum over data, each metric summed or averaged as its key (":sum" / ":mean") says."""

    def loss_fn(data, logprobs_D):
        total, metrics_D = 0, []
        for datum, lp in zip(data, logprobs_D):
            args = [datum.loss_fn_inputs[name].to_torch() for name in handle.input_names]
            loss, metrics = handle.graph(lp, *args)
            total = total + loss
            metrics_D.append(metrics)
        merged = {}
        for key in metrics_D[0] if metrics_D else {}:
            values = [float(m[key]) for m in metrics_D]
            merged[key] = sum(values) / len(values) if key.endswith(":mean") else sum(values)
        return total, merged

    return loss_fn


def _grad_rows(loss_fn: str, datum: types.Datum, config: dict | None = None) -> torch.Tensor:
    """Positions whose log-prob the built-in loss depends on: elsewhere its gradient is exactly zero (weight 0 for
    cross_entropy, advantage 0 for the policy-gradient losses); dro's quadratic term, and stable_reinforce's KL term
    when kl_coeff is set, reach every position."""
    if loss_fn == "dro" or (loss_fn == "stable_reinforce" and (config or {}).get("kl_coeff")):
        return torch.ones(datum.model_input.length, dtype=torch.bool)
    key = "weights" if loss_fn == "cross_entropy" else "advantages"
    nonzero = datum.loss_fn_inputs[key].to_torch() != 0
    return nonzero.any(dim=-1) if nonzero.dim() == 2 else nonzero  # top-K cross_entropy: any of a position's K


def _unused_prefix(used_rows_T: torch.Tensor) -> int:
    """How many leading positions the loss does not use (all of them when it uses none)."""
    used = used_rows_T.nonzero()
    return int(used[0, 0]) if len(used) else len(used_rows_T)


def _reject_unsupported(method: str, options: dict) -> None:
    used = {k: v for k, v in options.items() if v not in (None, 0, False)}
    if used:
        raise NotImplementedError(f"{method}: the local backend does not support {', '.join(used)}")


def _conforms(service: LocalServiceClient, training: LocalTrainingClient, sampling: LocalSamplingClient) -> None:
    """Never called: mypy checks here that these classes offer every member of the Protocols, typed compatibly."""
    _service: protocol.ServiceClient = service
    _training: protocol.TrainingClient = training
    _sampling: protocol.SamplingClient = sampling
