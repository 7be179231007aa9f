"""Where the local backend computes, and in which precision: the one place that decides it.

`choose("auto")` picks CUDA, then Apple's MPS, then the CPU; `choose("cpu" | "cuda" | "mps")` forces one and says
clearly when it is not there. The dtype follows the device: bf16 on a CUDA GPU that supports it fast (compute
capability 8.0 or later: Ampere, Hopper, Ada; earlier GPUs and MPS get fp32) and always fp32 on the CPU, where bf16
is about 30x slower (measured on this project's machines). LoRA weights and their optimizer stay fp32 whatever the
base model's dtype (peft keeps adapters in fp32).

What it is not: the code that moves tensors (the local backend moves a batch's inputs to the model's device and
brings log-probabilities back to the CPU, where the loss math and sampling decisions run), nor a memory planner.
The CPU's fast paths (packed attention, the merged-weights decoder) run only on the CPU; elsewhere the model's own
forward runs, which tests/test_fast_paths.py checks the fast paths against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from storage.input_error import InputError

DEVICES = ("auto", "cpu", "cuda", "mps")


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


def choose(requested: str = "auto", probes: Probes = Probes()) -> DeviceChoice:
    """The device and dtype for `requested` (one of DEVICES); DeviceError when a forced device is missing."""
    if requested not in DEVICES:
        raise DeviceError(f"device={requested!r}: choose one of {', '.join(DEVICES)}")
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
        if major >= 8:
            return DeviceChoice("cuda", torch.bfloat16, f"CUDA GPU (compute capability {major}.{minor}): bf16")
        return DeviceChoice(
            "cuda", torch.float32, f"CUDA GPU (compute capability {major}.{minor} has no fast bf16): fp32"
        )
    if requested == "mps" or (requested == "auto" and has_mps):
        return DeviceChoice("mps", torch.float32, "Apple MPS: fp32 (bf16 support on MPS is partial)")
    why = "asked for" if requested == "cpu" else "no CUDA GPU or MPS found"
    return DeviceChoice("cpu", torch.float32, f"CPU ({why}): fp32, since bf16 is about 30x slower on a CPU")


def model_device(model) -> torch.device:
    """The device a (maybe peft-wrapped) model's weights are on."""
    return next(model.parameters()).device


def on_cpu(model) -> bool:
    return model_device(model).type == "cpu"
