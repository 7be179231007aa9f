"""Device choice (cookbook_engine/device.py), tested on the CPU: what auto picks on machines with and without a GPU,
the dtype each gets, clear refusals of a missing device, and the local backend's CPU-only fast paths staying off
for a model that is not on the CPU. The GPU smoke test (tests/test_gpu_smoke.py) runs the loops where one exists."""

from __future__ import annotations

import pytest
import torch

from cookbook_engine import config as cfg, device
from cookbook_engine.device import DeviceError, Probes, choose


def machine(cuda=False, mps=False, capability=(9, 0)) -> Probes:
    return Probes(cuda=lambda: cuda, mps=lambda: mps, cuda_capability=lambda: capability)


def test_auto_prefers_cuda_then_mps_then_cpu():
    assert choose("auto", machine(cuda=True, mps=True)).device == "cuda"
    assert choose("auto", machine(mps=True)).device == "mps"
    assert choose("auto", machine()).device == "cpu"


def test_dtype_follows_the_device():
    assert choose("auto", machine(cuda=True, capability=(8, 0))).dtype == torch.bfloat16  # Ampere and later
    assert choose("auto", machine(cuda=True, capability=(7, 5))).dtype == torch.float32  # Turing: no fast bf16
    assert choose("mps", machine(mps=True)).dtype == torch.float32
    cpu = choose("cpu", machine(cuda=True))
    assert (cpu.device, cpu.dtype) == ("cpu", torch.float32) and "30x" in cpu.reason


def test_a_forced_device_that_is_missing_is_refused_with_the_reason():
    with pytest.raises(DeviceError, match="device=cuda: no CUDA GPU"):
        choose("cuda", machine())
    with pytest.raises(DeviceError, match="device=mps: Apple's Metal"):
        choose("mps", machine(cuda=True))
    with pytest.raises(DeviceError, match="device='tpu': choose one of auto, cpu, cuda, mps"):
        choose("tpu", machine())


def test_this_machine_gets_what_it_has():
    choice = choose("auto")
    expected = "cuda" if torch.cuda.is_available() else "mps" if Probes().mps() else "cpu"
    assert choice.device == expected


def test_run_settings_refuse_a_device_this_machine_lacks():
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    problems = cfg.validate(cfg.parse_overrides("sl", ["device=cuda"]))
    assert any(problem.startswith("device=cuda: no CUDA GPU is visible") for problem in problems), problems
    assert cfg.validate(cfg.parse_overrides("sl", ["device=cpu"])) == []
    assert cfg.validate(cfg.parse_overrides("sl", ["device=cuda", "backend=tinker"])) == []  # hosted: not used


def test_cpu_fast_paths_stay_off_for_a_model_that_is_not_on_the_cpu(default_model_ready):
    from cookbook_engine import models
    from cookbook_engine.backends import fast_decode, fast_ops

    model = models.load_model(default_model_ready)
    assert fast_ops.supports_packed(model) and fast_decode.MergedLlama.from_model(model) is not None
    meta = models.load_model(default_model_ready).to("meta")  # a model whose weights are not on the CPU
    assert device.model_device(meta).type == "meta"
    assert not fast_ops.supports_packed(meta)
    assert fast_decode.MergedLlama.from_model(meta) is None
