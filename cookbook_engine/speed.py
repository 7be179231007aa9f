"""How fast this machine trains and samples a model, measured rather than assumed, and run timing from a run's own
steps: the New run form's estimate and the run pages' elapsed time and ETA come from here.

`calibrate(model)` times a few seconds of real work on the local backend (a LoRA forward/backward, a no-grad
forward, a short sampled reply) and caches the speeds per model in the model cache, so the estimate reflects this
machine when it was measured (the work's own compute time, without the time it waited for other runs to take
their turn); `speeds(model)` returns the cached ones (or the figures measured on an idle 2-core CPU when there are
none yet, marked as such). A calibration during which other work used the CPU (another process computing, whether
or not it takes the compute lease) caches nothing: its figures would be the machine's speed under that load for the
next six hours (measured: 66 training tokens/s beside a CLI run, 221 alone, and an estimate of 27.7 min for a
4.5-min run), so the previous ones stay and it tries again later. `step_seconds()` and `eta_seconds()` correct the
estimate live from the steps a run has finished. `process_usage()` reads a run process's CPU and memory use.

Not here: the UI (app/forms.py formats the estimate), or timing hosted (Tinker) runs before they start.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cookbook_engine import models, paths, priority, shutdown

if TYPE_CHECKING:
    import psutil

CALIBRATION_TOKENS = 64  # per sequence
CALIBRATION_BATCH = 8  # sequences per forward/backward, and replies per group: the default batch and group size
CALIBRATION_REPLY = 16  # sampled tokens per reply
CALIBRATION_REPEATS = 3  # each speed is the median of this many timings
RECENT_STEPS = 5  # "s per step" is the median of the last few step times
ETA_STEPS = 20  # the time left comes from the mean of the last this many (see eta_seconds)
MEASUREMENT_MAX_AGE_S = 6 * 3600.0  # a machine's load changes: measure again after this long
OTHERS_CPU_SHARE_MAX = 0.25  # of the machine's cores, used by other processes while calibrating: more is not idle
RETRY_AFTER_BUSY_S = 600.0  # a calibration skipped for other work tries again after this long
log = logging.getLogger(__name__)


@dataclass
class Speeds:
    train_tok_s: float  # LoRA forward + backward + optimizer step
    eval_tok_s: float  # forward without gradients, a batch at once (held-out loss, DPO reference)
    sample_tok_s: float  # generated tokens per second, a group of samples at once
    measured_at: float = 0.0  # time.time() of the calibration; 0 = not measured here (idle-machine figures)
    single_sample_tok_s: float = 0.0  # generated tokens per second, one reply per request (RL's held-out evaluations)

    def __post_init__(self) -> None:
        if not self.single_sample_tok_s:  # measured once: 32 single replies at 13.5 tok/s beside a group's 46.9
            self.single_sample_tok_s = self.sample_tok_s / 3.5


IDLE_2_CORE = Speeds(train_tok_s=120.0, eval_tok_s=300.0, sample_tok_s=60.0)  # DESIGN.md's measured figures

_calibrating: dict[str, threading.Thread] = {}
_lock = threading.Lock()


def _cache_file(model: str) -> Path:
    # "compute": measured as the worker's own compute time; older files (wall time, which counted the wait for other
    # runs' turns: one measured 18 tok/s on a machine that trains at 400) are not read. "batch8": measured on a batch
    # of 8 and a group of 8 replies, as runs train and sample; older files (2 sequences, 4 replies) are not read
    return paths.models_dir() / f"speed-compute-batch8-{models.canonical_name(model).replace('/', '--')}.json"


def speeds(model: str = models.DEFAULT_MODEL) -> Speeds:
    """The speeds measured on this machine for `model`, else the idle 2-core figures (measured_at 0)."""
    try:
        return Speeds(**json.loads(_cache_file(model).read_text()))
    except (OSError, ValueError, TypeError):
        return IDLE_2_CORE


def calibrate(model: str = models.DEFAULT_MODEL) -> Speeds | None:
    """Measure the speeds now (a few seconds; the model worker is shared, so it waits behind running work) and
    cache them for `model`; None (nothing cached, the previous figures stay) when other work used the CPU meanwhile
    (`skipped_because(model)` says what)."""
    from tinker import types

    from cookbook_engine.backends import service_client

    service = service_client("local")
    sharing = MachineSharing()
    trainer = service.create_lora_training_client(base_model=model, rank=32, train_unembed=False).result()
    tokens_T = list(range(10, 10 + CALIBRATION_TOKENS))
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens_T[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens_T[1:], dtype="int64"),
            "weights": types.TensorData(data=[1.0] * (len(tokens_T) - 1), dtype="float32"),
        },
    )
    try:
        trainer.forward_backward([datum], "cross_entropy").result()  # warm-up: first call builds the adapter
        batch = [datum] * CALIBRATION_BATCH
        tokens = CALIBRATION_BATCH * CALIBRATION_TOKENS
        train = _median_rate(
            lambda: (
                tokens
                / (
                    _seconds(trainer.forward_backward(batch, "cross_entropy"))
                    + _seconds(trainer.optim_step(types.AdamParams(learning_rate=0.0)))
                )
            )
        )
        sampler = service.create_sampling_client(base_model=model).result()
        prompt = types.ModelInput.from_ints(tokens_T)
        sampler.sample(prompt, 4, types.SamplingParams(max_tokens=2)).result()  # warm-up: builds the decoder
        # scoring without gradients, batched as held-out evaluations and DPO's reference are (a single 64-token
        # compute_logprobs call measured a sixth of that throughput under load: its fixed cost dominated)
        evaluation = _median_rate(lambda: tokens / _seconds(trainer.forward(batch, "cross_entropy")))
        sample = _median_rate(lambda: _sampled_rate(sampler, prompt, CALIBRATION_BATCH))
    finally:
        if hasattr(trainer, "close"):
            trainer.close()
    busy = sharing.others_note()
    if busy:
        _skip_file(model).write_text(json.dumps({"at": time.time(), "why": busy}) + "\n")
        log.info("not caching the speeds measured for %s: %s", model, busy)
        return None
    _skip_file(model).unlink(missing_ok=True)
    measured = Speeds(round(train, 1), round(evaluation, 1), round(sample, 1), time.time())
    _cache_file(model).write_text(json.dumps(asdict(measured)) + "\n")
    return measured


class MachineSharing:
    """Whether other work used this machine's CPU from its creation until `others_note()`: another process's turns
    on the compute lease (a CLI run, `cookbook serve`, the studio's run processes), or any other process's CPU time
    above OTHERS_CPU_SHARE_MAX of the cores (what the lease cannot see: a process with the lease off, a build, a
    browser). Read from the kernel's counters, so it holds whoever the other work is."""

    def __init__(self) -> None:
        import psutil

        from cookbook_engine import compute_lease

        self._lease = compute_lease.lease()
        self._waited = self._lease.waited_seconds
        self._wall = time.monotonic()
        self._cpus = _our_cpus()  # read once: the same cores before and after
        self._machine = _busy_cpu_seconds(self._cpus)
        self._own = sum(psutil.Process().cpu_times()[:2])

    def others_note(self) -> str:
        """'' when nothing else used the CPU, else what did (for the log and the New run form)."""
        import psutil

        waited = self._lease.waited_seconds - self._waited
        if waited > 0:
            return f"another process computed for {waited:.1f} s of it (the compute lease)"
        wall = max(1e-6, time.monotonic() - self._wall)
        others = _busy_cpu_seconds(self._cpus) - self._machine - (sum(psutil.Process().cpu_times()[:2]) - self._own)
        share = others / (wall * len(self._cpus))
        if share > OTHERS_CPU_SHARE_MAX:
            return f"other processes used {share:.0%} of the CPU meanwhile"
        return ""


def _our_cpus() -> list[int]:
    """The cores this process may run on (all of them unless its affinity says otherwise)."""
    import os

    import psutil

    everyone = len(psutil.cpu_times(percpu=True))
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(everyone)
    return [cpu for cpu in allowed if cpu < everyone] or list(range(everyone))


def _busy_cpu_seconds(cpus: list[int]) -> float:
    """CPU seconds spent computing (user, nice, system, interrupts) on `cpus`, summed; idle,
    waiting for disk and time taken by the hypervisor (steal) are not this machine's other work."""
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    fields = ("user", "nice", "system", "irq", "softirq")
    return sum(getattr(per_cpu[cpu], field, 0.0) for cpu in cpus for field in fields)


def _skip_file(model: str) -> Path:
    """Where a skipped calibration is remembered, beside the speeds, so every process on the machine (each studio the
    browser tests start, a restarted studio) waits RETRY_AFTER_BUSY_S rather than measuring again at once."""
    return _cache_file(model).with_suffix(".skipped.json")


def skipped_because(model: str = models.DEFAULT_MODEL) -> str | None:
    """Why the last calibration of `model` cached nothing (other work ran), while that is recent enough that it
    waits before trying again; else None."""
    try:
        skipped = json.loads(_skip_file(model).read_text())
        when, why = float(skipped["at"]), str(skipped["why"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return why if time.time() - when < RETRY_AFTER_BUSY_S else None


def _median_rate(measure: Callable[[], float], times: int = CALIBRATION_REPEATS) -> float:
    """The median of a few measurements: on a machine other work shares, one timing of a few seconds read 64 and,
    three minutes later, 440 training tokens/s (benchmarks/README.md, the estimate against the run)."""
    return statistics.median(measure() for _ in range(times))


def _sampled_rate(sampler, prompt, replies: int) -> float:
    """Tokens per second sampling `replies` replies of CALIBRATION_REPLY tokens at once."""
    from tinker import types

    params = types.SamplingParams(max_tokens=CALIBRATION_REPLY, temperature=1.0)
    request = sampler.sample(prompt, replies, params)
    seconds = _seconds(request)
    return max(1, sum(len(s.tokens) for s in request.result().sequences)) / seconds


def _seconds(future) -> float:
    """How long the request computed: the model worker's own figure, which leaves out the time it waited for its
    turn (behind other runs in this process, or for another process's compute lease), so a calibration taken while
    other runs train still measures this machine's speed; else the wall time until its result."""
    started = time.perf_counter()
    future.result()
    wall = time.perf_counter() - started
    computed = getattr(future, "compute_seconds", None)
    return max(1e-6, computed if computed is not None else wall)


def calibrate_in_background(model: str = models.DEFAULT_MODEL) -> bool:
    """Start calibrating `model` on a background thread unless it was measured in the last few hours, is being
    measured, or was skipped for other work in the last RETRY_AFTER_BUSY_S; True while a calibration runs (the
    estimate keeps the previous figures meanwhile)."""
    key = models.canonical_name(model)
    with _lock:
        thread = _calibrating.get(key)
        if thread is not None and thread.is_alive():
            return True
        if time.time() - speeds(model).measured_at < MEASUREMENT_MAX_AGE_S or skipped_because(model):
            return False
        thread = threading.Thread(target=_calibrate_quietly, args=(model,), name=f"calibrate:{key}", daemon=True)
        _calibrating[key] = thread
        priority.start(thread)  # measured at the studio's priority, not a page's
        shutdown.register(
            f"calibration of {key}", shutdown.CLIENTS, lambda timeout_s: shutdown.join_thread(thread, timeout_s)
        )
        return True


def _calibrate_quietly(model: str) -> None:
    try:
        calibrate(model)
    except Exception:  # the estimate keeps the idle-machine figures; nothing else depends on this
        log.info("calibrating %s failed; the estimate keeps the idle-machine figures", model, exc_info=True)


# ---------------------------------------------------------------------------------------------- a run's own timing


PER_STEP_TOTAL_KINDS = ("rl", "distill")  # their time/total is each step's own time (tinker-cookbook's RL metric)


def step_seconds(total_T: list[tuple[int, float]], kind: str = "sl") -> list[float]:
    """Durations of finished steps from the run's `time/total` metric [(step, value)]. In SL and DPO the value is the
    seconds since the run started (a resume restarts that clock, so steps across a restart are left out); in RL and
    distillation it is the step's own time (its evaluation included), so the values are the durations."""
    ordered = sorted(total_T)
    if kind in PER_STEP_TOTAL_KINDS:
        return [seconds for _, seconds in ordered if seconds > 0]
    if len(ordered) == 1:  # one step done: its time since the start (with loading: an upper bound) until a second
        return [ordered[0][1]] if ordered[0][1] > 0 else []
    return [
        later - earlier for (s0, earlier), (s1, later) in zip(ordered, ordered[1:]) if s1 == s0 + 1 and later > earlier
    ]


def recent_step_seconds(durations: list[float]) -> float | None:
    """The median of the last few step times (None before any)."""
    return statistics.median(durations[-RECENT_STEPS:]) if durations else None


def eta_seconds(step: int | None, total_steps: int | None, durations: list[float]) -> float | None:
    """Seconds until the run's last step: the steps left times the mean of its last ETA_STEPS step times (None until
    it has some). The mean counts the evaluations and checkpoint saves among those steps at their share, and twenty
    steps hold still while a shared machine's load comes and goes: a median of the last five read 0.91 s a step at
    step 52 and 1.67 s at step 57 of the same run, so the Runs table said 5 min 17 s left and the Run page, moments
    later, 9 min 32 s."""
    if not total_steps or not durations:
        return None
    return max(0, total_steps - (step or 0)) * statistics.fmean(durations[-ETA_STEPS:])


def clock(seconds: float | None) -> str:
    """45 -> '45 s', 130 -> '2 min 10 s', 5400 -> '1 h 30 min'."""
    if seconds is None:
        return ""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


# ---------------------------------------------------------------------------------------------- resource use

_processes: dict[int, psutil.Process] = {}


def process_usage(pid: int | None) -> dict | None:
    """CPU use (percent of one core, since the last call for this process) and resident memory of a process,
    with the machine's overall CPU use and core count; None when the process is gone or unknown. GPU memory is
    added when torch sees a CUDA device in this process."""
    import psutil

    if not pid:
        return None
    try:
        process = _processes.get(pid)
        if process is None:
            process = _processes[pid] = psutil.Process(pid)
            process.cpu_percent(None)  # the first reading is 0: it starts the interval
        usage = {
            "cpu_percent": process.cpu_percent(None),
            "rss_bytes": process.memory_info().rss,
            "machine_cpu_percent": psutil.cpu_percent(None),
            "cores": psutil.cpu_count() or 1,
        }
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        _processes.pop(pid, None)
        return None
    gpu = _gpu_bytes()
    if gpu is not None:
        usage["gpu_bytes"] = gpu
    return usage


def _gpu_bytes() -> int | None:
    import sys

    torch = sys.modules.get("torch")  # never import torch just to ask
    if torch is None or not torch.cuda.is_available():
        return None
    return int(torch.cuda.memory_allocated())
