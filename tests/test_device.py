"""Device choice (cookbook_engine/device.py), tested on the CPU: what auto picks on machines with and without a GPU,
the dtype each gets, clear refusals of a missing device, and the local backend's CPU-only fast paths staying off
for a model that is not on the CPU. The GPU smoke test (tests/test_gpu_smoke.py) runs the loops where one exists."""

from __future__ import annotations

import pytest
import torch

from cookbook_engine import config as cfg, device
from cookbook_engine.device import DeviceError, Probes, choose


def machine(cuda=False, mps=False, capability=(9, 0), cpu_flags=(), bf16_speedup=1.0) -> Probes:
    """A machine with these devices; its CPU has `cpu_flags` and runs bf16 matmuls `bf16_speedup` times as fast as
    fp32 (the calibration's figure), whatever CPU runs the test."""
    return Probes(
        cuda=lambda: cuda,
        mps=lambda: mps,
        cuda_capability=lambda: capability,
        cpu_flags=lambda: frozenset(cpu_flags),
        bf16_speedup=lambda: bf16_speedup,
        calibrate=lambda: True,
    )


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


def cpu(flags=(), speedup=1.0, calibrate=True, measured=None) -> Probes:
    def bf16_speedup() -> float:
        if measured is not None:
            measured.append(1)
        return speedup

    return Probes(
        cuda=lambda: False,
        mps=lambda: False,
        cpu_flags=lambda: frozenset(flags),
        bf16_speedup=bf16_speedup,
        calibrate=lambda: calibrate,
    )


def test_cpu_auto_picks_bf16_only_with_matrix_units_and_a_calibration_that_confirms_it():
    calls: list[int] = []
    plain = choose("auto", cpu(flags=("avx2", "fma"), speedup=9.0, measured=calls))
    assert plain.dtype == torch.float32 and "no AMX or AVX-512 BF16" in plain.reason
    assert calls == []  # no bf16 units: nothing is measured
    amx = choose("auto", cpu(flags=("amx_bf16", "amx_tile"), speedup=6.4, measured=calls))
    assert amx.dtype == torch.bfloat16 and "amx_bf16" in amx.reason and "6.4x" in amx.reason and calls == [1]
    avx = choose("cpu", cpu(flags=("avx512_bf16",), speedup=1.8))
    assert avx.dtype == torch.bfloat16 and "avx512_bf16" in avx.reason
    slow = choose("auto", cpu(flags=("avx512_bf16",), speedup=1.1))
    assert slow.dtype == torch.float32 and "only 1.10x" in slow.reason
    off = choose("auto", cpu(flags=("amx_bf16",), speedup=6.0, calibrate=False))
    assert off.dtype == torch.float32 and "COOKBOOK_CALIBRATE=off" in off.reason


def test_a_forced_dtype_is_used_or_refused_with_the_reason():
    calls: list[int] = []
    assert choose("auto", cpu(flags=("amx_bf16",), speedup=6.0), dtype="fp32").dtype == torch.float32
    forced = choose("auto", cpu(flags=("avx2",), measured=calls), dtype="bf16")
    assert forced.dtype == torch.bfloat16 and "slower" in forced.reason and calls == []  # allowed, with a warning
    assert choose("auto", cpu(flags=("amx_bf16",), speedup=0.5), dtype="bf16").dtype == torch.bfloat16
    assert choose("auto", machine(cuda=True, capability=(9, 0)), dtype="fp32").dtype == torch.float32
    assert choose("auto", machine(cuda=True, capability=(8, 6)), dtype="bf16").dtype == torch.bfloat16
    with pytest.raises(DeviceError, match="dtype=bf16: this CUDA GPU .compute capability 7.5. has no fast bf16"):
        choose("cuda", machine(cuda=True, capability=(7, 5)), dtype="bf16")
    with pytest.raises(DeviceError, match="dtype=bf16: bf16 support on Apple MPS is partial"):
        choose("auto", machine(mps=True), dtype="bf16")
    with pytest.raises(DeviceError, match="dtype='fp16': choose one of auto, fp32, bf16"):
        choose("auto", machine(), dtype="fp16")


def test_calibration_is_measured_once_per_cpu_and_cached(tmp_path, monkeypatch):
    from cookbook_engine import calibration

    monkeypatch.setenv("COOKBOOK_MODEL_CACHE", str(tmp_path))
    monkeypatch.delenv("COOKBOOK_CALIBRATE", raising=False)
    runs: list[int] = []
    first = calibration.measured("probe", lambda: runs.append(1) or {"value": 2.5})
    again = calibration.measured("probe", lambda: runs.append(1) or {"value": 9.0})
    assert first == again == {"value": 2.5} and runs == [1]
    assert calibration.cache_key() in (tmp_path / calibration.CACHE_FILE).read_text()
    monkeypatch.setenv("COOKBOOK_CALIBRATE", "again")
    assert calibration.measured("probe", lambda: {"value": 9.0}) == {"value": 9.0}
