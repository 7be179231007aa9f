"""Shared pieces of the benchmark scripts: the benchmark chat data, the machine's measured matmul peak, load
averages, medians, printed tables and the JSON result files under benchmarks/results/.

The data are built here, deterministically, from the built-in datasets' sentences: conversations whose rendered
length is spread evenly over a range (64 to 280 tokens by default), with the loss on the assistant reply only.
Nothing here times a peer or our backend: each benchmark script does that itself.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# ------------------------------------------------------------------------------------------------------ data


def _sentences() -> list[str]:
    from cookbook_engine.data import builtin as builtin_data

    sentences = [f.answer for f in builtin_data.FACTS] + [q for f in builtin_data.FACTS for q in f.questions]
    sentences += [answer for _, answer in builtin_data.GENERAL_FACTS]
    sentences += [question for question, _ in builtin_data.GENERAL_FACTS]
    sentences += [f"The capital of {country} is {capital}." for country, capital in builtin_data.CAPITALS]
    return sentences


def chat_examples(
    tokenizer, count: int, min_tokens: int = 64, max_tokens: int = 280, seed: int = 0
) -> list[tuple[list[int], list[float]]]:
    """`count` rendered conversations (tokens, loss weights) with lengths spread evenly over
    [min_tokens, max_tokens]: a user turn of 25-60% of the length, the rest the assistant's reply (weight 1)."""
    from cookbook_engine.renderers import get_renderer

    renderer = get_renderer("auto", tokenizer)
    rng = random.Random(seed)
    pool = _sentences()
    examples = []
    for index in range(count):
        target = min_tokens + (max_tokens - min_tokens) * index // max(1, count - 1)
        user_words, reply_words = [], []
        user_target = int(target * rng.uniform(0.25, 0.6))
        while len(tokenizer.encode(" ".join(user_words))) < user_target - 8:
            user_words += rng.choice(pool).split()
        while True:
            reply_words += rng.choice(pool).split()
            tokens, weights = renderer.build_supervised_example(
                [
                    {"role": "user", "content": " ".join(user_words)},
                    {"role": "assistant", "content": " ".join(reply_words)},
                ]
            )
            if len(tokens) >= target:
                break
        examples.append((tokens[:max_tokens], weights[:max_tokens]))
    rng.shuffle(examples)
    return examples


def chat_prompt(tokenizer) -> list[int]:
    """The sampling benchmarks' one chat prompt (an open question, so 64 new tokens rarely stop early)."""
    from cookbook_engine.renderers import get_renderer

    renderer = get_renderer("auto", tokenizer)
    question = "Write a short story about a lighthouse keeper who finds a message in a bottle."
    return renderer.build_generation_prompt([{"role": "user", "content": question}]).to_ints()


# --------------------------------------------------------------------------------------------------- machine


def matmul_peak_gflops(size: int = 1536, repeats: int = 8) -> dict[str, float]:
    """This machine's matmul throughput at the current thread count, best of `repeats`, in fp32 and in bf16:
    torch's default kernel (`torch.mm`, MKL for fp32) and oneDNN's (`mkldnn._linear_pointwise`, which the local
    backend uses). `peak` is the fastest fp32 kernel, `bf16_peak` the fastest bf16 one (on a CPU without bf16
    units bf16 is emulated and far slower, which the figure then shows)."""
    flops = 2 * size**3

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return flops / min(times) / 1e9

    result: dict[str, float] = {}
    for prefix, dtype in (("", torch.float32), ("bf16_", torch.bfloat16)):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        result[prefix + "torch_mm"] = best(lambda a=a, b=b: torch.mm(a, b))
        try:
            result[prefix + "onednn"] = best(
                lambda a=a, b=b: torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
            )
        except (RuntimeError, AttributeError):
            result[prefix + "onednn"] = float("nan")
    result["peak"] = max(v for k, v in result.items() if not k.startswith("bf16_") and v == v)
    result["bf16_peak"] = max(v for k, v in result.items() if k.startswith("bf16_") and v == v)
    return result


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    from cookbook_engine import calibration

    flags = calibration.cpu_info()[1]
    return {
        "cpu": cpu,
        "matrix_flags": sorted(flag for flag in calibration.MATRIX_FLAGS if flag in flags),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": memory_gib,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def machine_flags() -> frozenset[str]:
    """The CPU's flags (empty where /proc/cpuinfo is missing)."""
    from cookbook_engine import calibration

    return calibration.cpu_info()[1]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cookbook(args: list[str], home: Path) -> subprocess.CompletedProcess:
    """`cookbook ARGS...` in the studio home `home`; RuntimeError with its stderr's tail if it fails."""
    env = {**os.environ, "COOKBOOK_HOME": str(home)}
    result = subprocess.run(
        [sys.executable, "-m", "cookbook_engine.cli", *args], env=env, cwd=REPO, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"cookbook {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


def start_serve(port: int, *options: str, ready_within_s: float = 180) -> subprocess.Popen:
    """`cookbook serve --port PORT OPTIONS...` as a subprocess (the environment's COOKBOOK_HOME is its studio home),
    returned once /api/v1/healthz answers; terminated if it does not within `ready_within_s`."""
    import httpx

    server = subprocess.Popen(
        [sys.executable, "-m", "cookbook_engine.cli", "serve", "--port", str(port), *options],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + ready_within_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.5)
    server.terminate()
    server.wait(30)
    raise RuntimeError(
        f"cookbook serve did not answer on port {port} within {ready_within_s:g} s (exit {server.poll()})"
    )


def on_model_worker(fn):
    """Run fn on the local backend's model worker thread (the default model's) and return its result. Benchmarks
    run the peers' model code there too, so that the process has a single OpenMP thread team: a second team on
    another thread makes libgomp throttle its spin-waiting (more threads than cores), which slows code made of
    many small parallel regions, decoding most (measured ~25%), for whichever side runs after it."""
    from cookbook_engine import models
    from cookbook_engine.backends.local import get_worker

    return get_worker(models.DEFAULT_MODEL).call(fn)


def exit_after_profile() -> None:
    """End the process now, results written: after torch.profiler ran on the model worker's (daemon) thread, the
    interpreter's normal shutdown sometimes aborts in C++ ("terminate called without an active exception")."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------------- output


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def print_table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def print_profile(title: str, profiler, category_of) -> dict[str, float]:
    """Self CPU seconds of a torch.profiler run grouped by `category_of(op name)`, printed as a table with each
    category's share; returns {category: seconds}."""
    categories: dict[str, float] = {}
    for event in profiler.key_averages():
        name = category_of(event.key)
        categories[name] = categories.get(name, 0.0) + event.self_cpu_time_total / 1e6
    total = sum(categories.values())
    rows = sorted(([name, value, value / total] for name, value in categories.items()), key=lambda r: -r[1])
    print_table(title, ["category", "seconds", "share"], rows)
    return categories


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """benchmarks/results/<name>.json with the payload, the machine, the load averages and the command."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    python = Path(sys.executable)
    python = python.relative_to(REPO) if python.is_relative_to(REPO) else python.name
    record = {
        "benchmark": name,
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join([str(python), *sys.argv]),
        "machine": machine(),
        "load_average_end": load_average(),
        **payload,
    }
    path = RESULTS / f"{name}.json"
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(path)
    print(f"\nwrote {path.relative_to(REPO)}")
    return path


def print_and_append(results: Path, result: dict) -> None:
    """Print a benchmark's result and append it to the JSON list in `results`."""
    print(json.dumps(result, indent=1), flush=True)
    previous = json.loads(results.read_text()) if results.exists() else []
    results.write_text(json.dumps([*previous, result], indent=1) + "\n")


def run_once_and_append(prefix: str, results: Path, run: Callable[[dict[str, str], Path], dict]) -> None:
    """One run per call: a fresh studio home, the settings from argv[1] ("key=value,key=value"), `run`'s result
    printed and appended to the JSON list in `results`."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["COOKBOOK_HOME"] = str(home)
    (spec,) = sys.argv[1:] or [""]
    settings = dict(item.split("=", 1) for item in spec.split(",") if item)
    print_and_append(results, run(settings, home))


def retention_of_eval(store, eval_id: str, skip_base: bool) -> dict[str, Any]:
    """An evaluation job's builtin:retention result (retention_loss: lost, gained, the paired interval) and the
    trained model's wrong replies ("question -> reply"). With skip_base the base model was not asked: every question
    counts as right before, which holds only where the base answers all of builtin:retention (fp32 on the default
    model; the caller says so)."""
    from cookbook_engine.evals.retention import retention_loss, retention_of_job

    rows = store.examples(eval_id, "builtin:retention")
    wrong = rows[(rows["model"] != "base") & ~rows["correct"].astype(bool)]
    if skip_base:
        right = rows.sort_values("idx")["correct"].astype(bool).tolist()
        result = {**retention_loss([True] * len(right), right), "base": "not asked (answers all)"}
    else:
        result = retention_of_job(rows)
    return {**result, "trained_wrong": [f"{row['prompt']} -> {row['output']}" for _, row in wrong.iterrows()]}
