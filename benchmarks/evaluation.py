"""Benchmark: an evaluation of `builtin:arithmetic` (its 100 held-out problems, greedy, 32 new tokens at most, stop
at the chat template's end-of-turn) through our evaluator against a plain batched `generate` loop, side by side.

Ours: `evaluators.evaluate` on the local backend's base-model sampling client, as `cookbook eval` runs it (prompts
sent BATCH_PROMPTS at a time through `sample_many`, one decode batch each, grading included). Peer: the same
rendered prompts, left-padded, through transformers' `generate` (fp32, and bf16 too where the CPU has bf16 units;
greedy, stop at the same tokens) in batches of each size in --peer-batches, grading by the same grader; the fastest
dtype and batch size is the comparison. Before the
change this benchmark came with, our evaluator sent one request per prompt (8 in flight), which
`--one-by-one` still measures. Calls alternate (ours, peer, ...) after one warm-up each on 8 prompts; figures are
medians of examples per second. Replies are compared prompt by prompt (greedy: with both sides in fp32 they
should be equal; ours in bf16 differs where rounding moves a near-tie) and the accuracies given.

    .venv/bin/python benchmarks/evaluation.py [--repeats 3] [--peer-batches 16,32,100] [--one-by-one]

Not a test: prints a table and writes benchmarks/results/evaluation.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("COOKBOOK_HOME", str(Path(tempfile.gettempdir()) / "cookbook-bench-home"))

import common  # noqa: E402  (sets sys.path for the engine)
import torch  # noqa: E402

from cookbook_engine import models  # noqa: E402
from cookbook_engine.evals import evaluators, sets  # noqa: E402
from cookbook_engine.renderers import get_renderer  # noqa: E402
from cookbook_engine.rl import graders  # noqa: E402

SET = "builtin:arithmetic"


def warm_up(sides: dict, eval_set):
    """One call of each side on the first 8 prompts (builds our decoder's weights, warms oneDNN and the allocator)."""
    small = sets.EvalSet(eval_set.name, eval_set.kind, "", eval_set.examples[:8], max_tokens=eval_set.max_tokens)
    for call in sides.values():
        call(small)


def ours_call(client, renderer, eval_set) -> tuple[float, list[str], float]:
    started = time.perf_counter()
    result = asyncio.run(evaluators.evaluate(client, renderer, eval_set, evaluators.EvalSettings()))
    seconds = time.perf_counter() - started
    return seconds, [r.output for r in result.examples], result.metric("accuracy").value


class _OneByOne:
    """Our client without sample_many: the evaluator's per-prompt path (as before batching)."""

    def __init__(self, client):
        self._client = client

    async def sample_async(self, *args):
        return await self._client.sample_async(*args)


def peer_call(model, tokenizer, renderer, eval_set, batch: int) -> tuple[float, list[str], float]:
    """A plain batched `generate` loop on the model worker's thread (common.on_model_worker says why)."""
    prompts = [
        renderer.build_generation_prompt([{"role": "user", "content": e.prompt}]).to_ints() for e in eval_set.examples
    ]
    stop_ids = [s for s in renderer.get_stop_sequences() if isinstance(s, int)] or [tokenizer.eos_token_id]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]

    def generate():
        started = time.perf_counter()
        replies = []
        for first in range(0, len(prompts), batch):
            chunk = prompts[first : first + batch]
            longest = max(len(p) for p in chunk)
            ids = torch.tensor([[pad] * (longest - len(p)) + p for p in chunk])
            mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in chunk])
            with torch.inference_mode():
                out = model.generate(
                    ids,
                    attention_mask=mask,
                    do_sample=False,
                    max_new_tokens=eval_set.max_tokens,
                    eos_token_id=stop_ids,
                    pad_token_id=pad,
                )
            for row in out[:, longest:].tolist():
                tokens = row[: next((i + 1 for i, t in enumerate(row) if t in stop_ids), len(row))]
                replies.append(renderer.parse_response(tokens)[0]["content"])
        correct = [graders.grade(e.grader, reply, e.answer).correct for e, reply in zip(eval_set.examples, replies)]
        return time.perf_counter() - started, replies, sum(correct) / len(correct)

    return common.on_model_worker(generate)


def tokens_processed(tokenizer, renderer, eval_set, replies: list[str]) -> int:
    """Prompt tokens plus reply tokens (and a stop token each): what the forward passes see, for the MFU."""
    prompts = sum(
        len(renderer.build_generation_prompt([{"role": "user", "content": e.prompt}]).to_ints())
        for e in eval_set.examples
    )
    return prompts + sum(len(tokenizer.encode(reply)) + 1 for reply in replies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per side (default 3)")
    parser.add_argument("--peer-batches", default="16,32,100", help="generate batch sizes to try (default 16,32,100)")
    parser.add_argument("--one-by-one", action="store_true", help="also time our evaluator one prompt per request")
    parser.add_argument("--dtype", default="auto", help="our local backend's dtype: auto (device.py), fp32 or bf16")
    args = parser.parse_args()
    batches = [int(b) for b in args.peer_batches.split(",")]

    from transformers import AutoModelForCausalLM

    from cookbook_engine import device
    from cookbook_engine.backends.local import LocalServiceClient

    models.prepare_default_model()
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    renderer = get_renderer("auto", tokenizer)
    eval_set = sets.load_eval_set(SET)
    load_start = common.load_average()
    print(f"threads {torch.get_num_threads()}, load average {load_start}, {len(eval_set.examples)} prompts", flush=True)
    service = LocalServiceClient(dtype=args.dtype)
    ours = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    print(f"ours: {service.compute.label}: {service.compute.reason}", flush=True)
    folder = str(models.default_cache_dir())
    # the peer in fp32, and in bf16 too where the CPU runs bf16 natively (its fastest there may be either)
    peer_dtypes = {"fp32": torch.float32}
    if set(device.BF16_UNITS) & common.machine_flags():
        peer_dtypes["bf16"] = torch.bfloat16
    plain = {
        name: common.on_model_worker(
            lambda dtype=dtype: AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
        )
        for name, dtype in peer_dtypes.items()
    }

    sides = {"ours": lambda s: ours_call(ours, renderer, s)}
    if args.one_by_one:
        sides["ours_one_by_one"] = lambda s: ours_call(_OneByOne(ours), renderer, s)
    for name in peer_dtypes:
        for batch in batches:
            sides[f"generate_{name}_b{batch}"] = lambda s, name=name, batch=batch: peer_call(
                plain[name], tokenizer, renderer, s, batch
            )
    warm_up(sides, eval_set)
    calls: dict[str, list[float]] = {name: [] for name in sides}
    replies: dict[str, list[str]] = {}
    accuracy: dict[str, float] = {}
    for repeat in range(args.repeats):
        for name, call in sides.items():
            seconds, replies[name], accuracy[name] = call(eval_set)
            calls[name].append(seconds)
        print(
            f"  repeat {repeat}: "
            + ", ".join(f"{k} {len(eval_set.examples) / v[-1]:.2f} ex/s" for k, v in calls.items()),
            flush=True,
        )
    load_end = common.load_average()
    peak = common.on_model_worker(common.matmul_peak_gflops)
    params = sum(p.numel() for p in plain["fp32"].parameters())
    ex_s = {name: len(eval_set.examples) / common.median(v) for name, v in calls.items()}
    mfu = {
        name: 2
        * params
        * tokens_processed(tokenizer, renderer, eval_set, replies[name])
        * rate
        / len(eval_set.examples)
        / (peak["peak"] * 1e9)
        for name, rate in ex_s.items()
    }
    peers = [name for name in ex_s if name.startswith("generate")]
    best_peer = max(peers, key=lambda name: ex_s[name])
    same = {name: sum(a == b for a, b in zip(replies["ours"], replies[name])) for name in replies if name != "ours"}
    rows = [
        [
            name,
            f"{ex_s[name]:.2f}",
            f"{ex_s[name] / ex_s[best_peer]:.2f}x",
            f"{mfu[name]:.1%}",
            f"{accuracy[name]:.2f}",
            same.get(name, "-"),
        ]
        for name in ex_s
    ]
    print(
        f"matmul peak: fp32 {peak['peak']:.0f} GFLOP/s (torch.mm {peak['torch_mm']:.0f}, oneDNN "
        f"{peak['onednn']:.0f}), bf16 {peak['bf16_peak']:.0f}"
    )
    common.print_table(
        f"{SET}: {len(eval_set.examples)} prompts, greedy, {eval_set.max_tokens} tokens max, ours "
        f"{service.compute.label}, peer {' and '.join(peer_dtypes)} "
        f"(median of {args.repeats}; load {load_start} -> {load_end})",
        ["side", "examples/s", f"vs {best_peer}", "MFU (fp32 peak)", "accuracy", "replies equal to ours"],
        rows,
    )
    common.write_result(
        "evaluation",
        {
            "setup": {
                "model": models.DEFAULT_MODEL,
                "peer_dtypes": list(peer_dtypes),
                "ours": service.compute.label,
                "set": SET,
                "prompts": len(eval_set.examples),
                "max_tokens": eval_set.max_tokens,
                "batch_prompts": evaluators.BATCH_PROMPTS,
                "repeats": args.repeats,
            },
            "load_average_start": load_start,
            "load_average_end": load_end,
            "examples_per_second": ex_s,
            "best_peer": best_peer,
            "ratio_to_best_peer": ex_s["ours"] / ex_s[best_peer],
            "accuracy": accuracy,
            "replies_equal_to_ours": same,
            "calls_seconds": calls,
            "matmul_peak_gflops": peak,
            "mfu_vs_fp32_peak": mfu,
        },
    )


if __name__ == "__main__":
    main()
