"""Short measurements of this CPU, made once per CPU model and cached in the model cache: how much faster bf16
matmuls run than fp32 (device.py reads it to decide dtype=auto), and which matmul kernel is fastest for each
shape class the local backend uses (fast_ops reads it: MKL through torch's own matmul, oneDNN, or oneDNN with the
weight prepacked into its blocked layout).

Why measured and not assumed from the vendor: oneDNN's fp32 kernels were twice MKL's speed on an AVX-512 AMD EPYC
(MKL takes its AVX2 path there) but about equal, and 6% slower inside the training step, on an Intel Xeon; bf16 is
~30x slower than fp32 on CPUs without AMX or AVX-512 BF16 and several times faster on those with it.

The cache is one JSON file, `cpu-calibration.json` in the model cache, keyed by CPU model name, the matrix-unit
flags, torch's version and the thread count; delete it (or set COOKBOOK_CALIBRATE=again) to measure afresh.
COOKBOOK_CALIBRATE=off skips measuring: bf16 is then not chosen automatically and the kernels stay as they were
before this module (oneDNN where it works).

Not here: what to do with the figures (device.py, backends/fast_ops.py).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch

MATRIX_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f")  # the flags that decide fp32 and bf16 speed
CACHE_FILE = "cpu-calibration.json"
SECONDS_PER_KERNEL = 0.2  # each kernel is timed for about this long in all, after one warm-up call
ROUNDS = 5  # ... in this many interleaved rounds, the best round counting

# (rows, in features, out features) of the default model's matmuls: a training micro-batch's projections and a
# decode step's (8 rows: a group of samples). The first is also the bf16-vs-fp32 shape.
SHAPES = {"train": (1024, 576, 1536), "decode": (8, 576, 1536)}
KERNELS = {"train": ("mkl", "onednn"), "decode": ("mkl", "onednn", "onednn_packed")}
DEFAULT_KERNEL = "onednn"  # what the local backend used before calibration, wherever oneDNN works
MARGIN = 1.1  # another kernel replaces the default only when at least this much faster (noise stays put)

_lock = threading.Lock()


@cache
def cpu_info() -> tuple[str, frozenset[str]]:
    """(CPU model name, its flags) from /proc/cpuinfo; ("unknown", {}) where there is none (macOS, Windows)."""
    name, flags = "unknown", frozenset[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == "unknown":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def cache_key() -> str:
    name, flags = cpu_info()
    units = ",".join(f for f in MATRIX_FLAGS if f in flags) or "no avx512/amx"
    return f"{name} | {units} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def _cache_path() -> Path:
    from cookbook_engine import paths

    return paths.models_dir() / CACHE_FILE


def _load() -> dict:
    try:
        return json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def measured(name: str, measure: Callable[[], dict]) -> dict:
    """The cached figures `name` for this CPU, measured (and cached) on first use."""
    mode = os.environ.get("COOKBOOK_CALIBRATE", "on").lower()
    with _lock:
        everything = _load()
        entry = everything.get(cache_key(), {})
        if name in entry and mode != "again":
            return entry[name]
        figures = measure()
        entry[name] = figures
        everything[cache_key()] = entry
        path = _cache_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(everything, indent=2))
            partial.replace(path)
        except OSError:
            pass  # a read-only cache: measure again next time
        return figures


def enabled() -> bool:
    return os.environ.get("COOKBOOK_CALIBRATE", "on").lower() != "off"


# ------------------------------------------------------------------------------------------------- timing


def _best_seconds(fns: dict[str, Callable[[], object]], budget: float = SECONDS_PER_KERNEL) -> dict[str, float]:
    """Seconds per call of each fn: the best of ROUNDS rounds, the fns interleaved within each round, so a burst of
    load from another process slows one round of every kernel rather than all of one kernel."""
    for fn in fns.values():
        fn()  # warm-up: first-call allocations, oneDNN's primitive cache
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            calls, started = 0, time.perf_counter()
            while True:
                fn()
                calls += 1
                elapsed = time.perf_counter() - started
                if elapsed >= budget / ROUNDS:
                    break
            best[name] = min(best[name], elapsed / calls)
    return best


def _matmul(kernel: str, x: torch.Tensor, weight: torch.Tensor) -> Callable[[], object]:
    if kernel == "mkl":
        return lambda: torch.nn.functional.linear(x, weight)
    if kernel == "onednn_packed":
        weight = torch.ops.mkldnn._reorder_linear_weight(weight, None)
    return lambda: torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def _bf16_against_fp32(shape_class: str, fp32_kernel: str, bf16_kernel: str) -> dict:
    """{speedup, fp32_gflops, bf16_gflops} of the shape class's matmul on the two kernels (speedup: fp32 seconds /
    bf16 seconds)."""
    rows, k, n = SHAPES[shape_class]
    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, k, generator=generator), torch.randn(n, k, generator=generator)
    seconds = _best_seconds(
        {"fp32": _matmul(fp32_kernel, x, w), "bf16": _matmul(bf16_kernel, x.bfloat16(), w.bfloat16())}
    )
    flops = 2 * rows * k * n
    return {
        "speedup": seconds["fp32"] / seconds["bf16"],
        "fp32_gflops": flops / seconds["fp32"] / 1e9,
        "bf16_gflops": flops / seconds["bf16"] / 1e9,
        "load_average": os.getloadavg()[0],
    }


def measure_bf16_speedup() -> dict:
    """fp32 seconds / bf16 seconds of the training shape's matmul (torch's default kernel for each dtype)."""
    return _bf16_against_fp32("train", "mkl", "mkl")


def bf16_speedup() -> dict:
    """{speedup, fp32_gflops, bf16_gflops} of this CPU (cached)."""
    return measured("bf16", measure_bf16_speedup)


def measure_kernels(onednn: bool) -> dict:
    """Per shape class: GFLOP/s of each kernel, and the chosen one (the default unless another is MARGIN faster)."""
    result: dict[str, object] = {}
    generator = torch.Generator().manual_seed(0)
    for shape_class, (rows, k, n) in SHAPES.items():
        x, w = torch.randn(rows, k, generator=generator), torch.randn(n, k, generator=generator)
        kernels = [kern for kern in KERNELS[shape_class] if onednn or kern == "mkl"]
        seconds = _best_seconds({kern: _matmul(kern, x, w) for kern in kernels})
        gflops = {kern: 2 * rows * k * n / seconds[kern] / 1e9 for kern in kernels}
        default = DEFAULT_KERNEL if onednn else "mkl"
        if shape_class == "decode" and onednn:
            default = "onednn_packed"  # the decoder prepacked its weights before calibration existed
        best = max(gflops, key=lambda kern: gflops[kern])
        chosen = best if gflops[best] > MARGIN * gflops[default] else default
        result[shape_class] = {"gflops": gflops, "chosen": chosen}
    result["load_average"] = os.getloadavg()[0]
    return result


def measure_decode_bf16(fp32_kernel: str) -> dict:
    """A decode step's matmul (SHAPES["decode"]) in bf16 on oneDNN with the weight prepacked, against fp32 on
    `fp32_kernel` (the one chosen for decoding). A decode step streams its weights, so half the bytes can be worth
    more than the bf16 units' arithmetic. Where oneDNN has no bf16 kernel for this CPU: speedup 0 and the reason."""
    try:
        return _bf16_against_fp32("decode", fp32_kernel, "onednn_packed")
    except (RuntimeError, AttributeError) as error:
        return {"speedup": 0.0, "unsupported": str(error).splitlines()[0], "load_average": os.getloadavg()[0]}


def decode_bf16(fp32_kernel: str) -> dict:
    """{speedup, fp32_gflops, bf16_gflops} of a decode step's matmul in bf16 against fp32 on this CPU (cached)."""
    return measured("decode_bf16", lambda: measure_decode_bf16(fp32_kernel))


def kernels(onednn: bool) -> dict:
    """The chosen kernel per shape class ({"train": ..., "decode": ...}) with the measured figures (cached)."""
    return measured("kernels" if onednn else "kernels-no-onednn", lambda: measure_kernels(onednn))
