"""Where the local backend computes, and in which precision: the one place that decides both.

`choose("auto")` picks CUDA, then Apple's MPS, then the CPU; `choose("cpu" | "cuda" | "mps")` forces one and says
clearly when it is not there. `dtype="auto"` then picks the compute precision for that device:
- a CUDA GPU: bf16 where it runs it fast (compute capability 8.0 or later: Ampere, Hopper, Ada), fp32 before;
- the CPU: bf16 only where the CPU has matrix units for it (`amx_bf16` or `avx512_bf16` among its flags in
  /proc/cpuinfo) AND a short calibration (calibration.py, ~1 s once per CPU model, cached) measured bf16 matmuls
  at least BF16_MIN_SPEEDUP times as fast as fp32; fp32 everywhere else (without those units bf16 is emulated and
  was measured ~30x slower);
- MPS: fp32 (bf16 support on MPS is partial).
`dtype="fp32"` forces fp32 anywhere. `dtype="bf16"` is refused with the reason on MPS and on CUDA GPUs older than
8.0; on a CPU without bf16 matrix units it is allowed (numerics comparisons need it) and the reason says it will be
many times slower. Only the frozen base weights take the chosen dtype: LoRA weights and their AdamW state stay fp32
(master weights), and so do the activations (mixed precision, fast_ops.install_frozen_linears): the base matmuls run
in bf16, while the residual stream, the LoRA delta's addition and the LM head's log-softmax run in fp32.

What it is not: the code that moves tensors (the local backend moves a batch's inputs to the model's device and
brings log-probabilities back to the CPU, where the loss math and sampling decisions run), nor a memory planner.
The CPU's fast paths run only on the CPU (packed attention in either dtype; the merged-weights decoder, whose matmuls
run in bf16 for a bf16 model only where the calibration measured a decode step faster so, fast_ops.decode_in_bf16);
elsewhere the model's own forward runs, which tests/test_fast_paths.py checks the fast paths against;
tests/test_bf16.py checks bf16 against fp32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from storage.input_error import InputError

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "fp32", "bf16")
BF16_UNITS = ("amx_bf16", "avx512_bf16")  # CPU flags of matrix units that run bf16 natively
BF16_MIN_SPEEDUP = 1.3  # bf16 must beat fp32 by this much in the calibration to be chosen on a CPU


class DeviceError(InputError, ValueError):
    """A device was asked for that this machine does not have; the message says what there is."""


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # "cpu", "cuda" or "mps"
    dtype: torch.dtype
    reason: str

    @property
    def label(self) -> str:
        return f"{self.device} ({str(self.dtype).replace('torch.', '')})"


@dataclass(frozen=True)
class Probes:
    """What the machine offers; tests replace these to check the choices a GPU machine would make."""

    cuda: Callable[[], bool] = torch.cuda.is_available
    mps: Callable[[], bool] = lambda: bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    cuda_capability: Callable[[], tuple[int, int]] = lambda: torch.cuda.get_device_capability()
    cpu_flags: Callable[[], frozenset[str]] = lambda: _calibration().cpu_info()[1]
    bf16_speedup: Callable[[], float] = lambda: float(_calibration().bf16_speedup()["speedup"])
    calibrate: Callable[[], bool] = lambda: _calibration().enabled()


def _calibration():
    from cookbook_engine import calibration

    return calibration


def choose(requested: str = "auto", probes: Probes = Probes(), dtype: str = "auto") -> DeviceChoice:
    """The device and dtype for `requested` (one of DEVICES) and `dtype` (one of DTYPES); DeviceError when a forced
    device is missing or a forced dtype cannot run there."""
    if requested not in DEVICES:
        raise DeviceError(f"device={requested!r}: choose one of {', '.join(DEVICES)}")
    if dtype not in DTYPES:
        raise DeviceError(f"dtype={dtype!r}: choose one of {', '.join(DTYPES)}")
    has_cuda, has_mps = probes.cuda(), probes.mps()
    if requested == "cuda" and not has_cuda:
        raise DeviceError(
            "device=cuda: no CUDA GPU is visible to torch here "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); use device=auto"
        )
    if requested == "mps" and not has_mps:
        raise DeviceError("device=mps: Apple's Metal (MPS) backend is not available here; use device=auto")
    if requested == "cuda" or (requested == "auto" and has_cuda):
        major, minor = probes.cuda_capability()
        gpu = f"CUDA GPU (compute capability {major}.{minor})"
        if dtype == "fp32":
            return DeviceChoice("cuda", torch.float32, f"{gpu}: fp32, as asked (dtype=fp32)")
        if major >= 8:
            why = "as asked (dtype=bf16)" if dtype == "bf16" else "it runs bf16 fast"
            return DeviceChoice("cuda", torch.bfloat16, f"{gpu}: bf16, {why}")
        if dtype == "bf16":
            raise DeviceError(f"dtype=bf16: this {gpu} has no fast bf16 (8.0 or later needed); use dtype=auto")
        return DeviceChoice("cuda", torch.float32, f"{gpu} has no fast bf16: fp32")
    if requested == "mps" or (requested == "auto" and has_mps):
        if dtype == "bf16":
            raise DeviceError("dtype=bf16: bf16 support on Apple MPS is partial; use dtype=auto (fp32)")
        return DeviceChoice("mps", torch.float32, "Apple MPS: fp32 (bf16 support on MPS is partial)")
    where = "CPU (asked for)" if requested == "cpu" else "CPU (no CUDA GPU or MPS found)"
    return _cpu_choice(where, probes, dtype)


def _cpu_choice(where: str, probes: Probes, dtype: str) -> DeviceChoice:
    if dtype == "fp32":
        return DeviceChoice("cpu", torch.float32, f"{where}: fp32, as asked (dtype=fp32)")
    units = [flag for flag in BF16_UNITS if flag in probes.cpu_flags()]
    if not units:
        if dtype == "bf16":
            return DeviceChoice(
                "cpu",
                torch.bfloat16,
                f"{where}: bf16 as asked (dtype=bf16), but this CPU has no AMX or AVX-512 BF16, so bf16 is "
                "emulated: expect it many times slower than fp32 (~30x measured on such CPUs)",
            )
        return DeviceChoice(
            "cpu", torch.float32, f"{where}: fp32, since the CPU has no AMX or AVX-512 BF16 (bf16 would be ~30x slower)"
        )
    if dtype == "bf16":
        return DeviceChoice(
            "cpu", torch.bfloat16, f"{where}: bf16 as asked (dtype=bf16; the CPU has {', '.join(units)})"
        )
    if not probes.calibrate():
        return DeviceChoice(
            "cpu", torch.float32, f"{where}: fp32 (the CPU has {', '.join(units)}, but COOKBOOK_CALIBRATE=off)"
        )
    speedup = probes.bf16_speedup()
    if speedup >= BF16_MIN_SPEEDUP:
        return DeviceChoice(
            "cpu",
            torch.bfloat16,
            f"{where}: bf16, since the CPU has {', '.join(units)} and bf16 matmuls measured {speedup:.1f}x "
            "fp32's speed",
        )
    return DeviceChoice(
        "cpu",
        torch.float32,
        f"{where}: fp32; the CPU has {', '.join(units)}, but bf16 matmuls measured only {speedup:.2f}x fp32's speed",
    )


def model_device(model) -> torch.device:
    """The device a (maybe peft-wrapped) model's weights are on."""
    return next(model.parameters()).device


def on_cpu(model) -> bool:
    return model_device(model).type == "cpu"
