"""Benchmark: RL-style group sampling of the local backend against transformers' `generate`, side by side.

One chat prompt, 8 samples, 64 new tokens each (no early stop, so both sides generate exactly 512 tokens),
temperature 0.7, top_p 0.9, no top_k, fp32. Two cases: the base model (peer: `generate` on the plain
AutoModelForCausalLM) and a LoRA rank-32 snapshot (peer: `generate` on the peft model with that adapter, as a
peft/TRL user samples during RL). Calls alternate (ours, peer, ours, peer, ...) after one warm-up call each, and
the figures are medians of generated tokens per second. Both sides run on the model worker's thread (see
common.on_model_worker). Our first call on a new LoRA snapshot also builds the
merged weight copy; that "cold" figure is reported beside the warm one. The script also checks that greedy
decoding gives the same tokens as `generate`.

    .venv/bin/python benchmarks/sample_group.py [--repeats 5]
    .venv/bin/python benchmarks/sample_group.py --profile    # where one of our calls spends its time

Not a test: it prints a table and writes benchmarks/results/sample_group.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("COOKBOOK_HOME", str(Path(tempfile.gettempdir()) / "cookbook-bench-home"))

import common  # noqa: E402  (sets sys.path for the engine)
import torch  # noqa: E402
from tinker import types  # noqa: E402

from cookbook_engine import models  # noqa: E402

SAMPLES = 8
NEW_TOKENS = 64
TEMPERATURE = 0.7
TOP_P = 0.9
RANK = 32


def ours_call(client, prompt: list[int], seed: int) -> tuple[float, int]:
    params = types.SamplingParams(max_tokens=NEW_TOKENS, temperature=TEMPERATURE, top_p=TOP_P, seed=seed, stop=[])
    started = time.perf_counter()
    response = client.sample(types.ModelInput.from_ints(prompt), SAMPLES, params).result()
    seconds = time.perf_counter() - started
    return seconds, sum(len(s.tokens) for s in response.sequences)


def peer_call(model, prompt: list[int], seed: int) -> tuple[float, int]:
    """`generate` on the model worker's thread (common.on_model_worker says why)."""
    ids = torch.tensor([prompt] * SAMPLES)

    def generate():
        torch.manual_seed(seed)
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=TEMPERATURE,
                top_p=TOP_P,
                top_k=0,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                pad_token_id=2,
            )
        return time.perf_counter() - started, (out.shape[1] - ids.shape[1]) * SAMPLES

    return common.on_model_worker(generate)


def lora_snapshot(service, tokenizer):
    """A LoRA rank-32 adapter after two steps on chat data, saved for sampling; returns (client, path)."""
    from cookbook_engine.backends import compat
    from cookbook_engine.training.common import datum_from_tokens

    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=RANK, seed=0).result()
    examples = common.chat_examples(tokenizer, 16, max_tokens=200)
    for start in (0, 8):
        client.forward_backward([datum_from_tokens(t, w) for t, w in examples[start : start + 8]], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-3))
    path = client.save_weights_for_sampler("bench-lora").result().path
    return client, path, str(compat.resolve(path))  # the tinker:// path and its folder (peft reads the folder)


GREEDY_TOKENS = 32


def greedy_agreement(ours_client, peer_model, prompt: list[int]) -> int:
    """How many of GREEDY_TOKENS greedy tokens ours gives before it first differs from `generate`'s."""
    params = types.SamplingParams(max_tokens=GREEDY_TOKENS, temperature=0, stop=[])
    ours = ours_client.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0].tokens
    ids = torch.tensor([prompt])

    def generate():
        with torch.inference_mode():
            return peer_model.generate(
                ids, do_sample=False, max_new_tokens=GREEDY_TOKENS, min_new_tokens=GREEDY_TOKENS, pad_token_id=2
            )

    theirs = common.on_model_worker(generate)[0, ids.shape[1] :].tolist()
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))


def profile(client, prompt: list[int]) -> dict:
    """One warm call of ours (base model) under torch.profiler on the model worker's thread, operator time grouped
    into categories."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from cookbook_engine.backends import sampler

    worker = client._worker
    params = types.SamplingParams(max_tokens=NEW_TOKENS, temperature=TEMPERATURE, top_p=TOP_P, seed=1, stop=[])
    ours_call(client, prompt, 0)

    def job():
        with worker.model.disable_adapter(), torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            started = time.perf_counter()
            rows, _ = sampler.sample(
                worker.model, worker.tokenizer, prompt, SAMPLES, params, weights_key=sampler.BASE_WEIGHTS
            )
            elapsed = time.perf_counter() - started
        return prof, elapsed, sum(len(r.tokens) for r in rows)

    prof, seconds, tokens = worker.call(job)
    categories = common.print_profile(
        f"Where one call of ours spends its time ({tokens} tokens in {seconds:.2f} s, {NEW_TOKENS} decode steps)",
        prof,
        _category,
    )
    return {"seconds": categories, "tokens": tokens, "call_seconds": seconds}


def _category(op: str) -> str:
    if "linear_pointwise" in op or op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"):
        return "matmul (merged layers, LM head)"
    if "scaled_dot_product" in op:
        return "attention (SDPA over the KV cache)"
    if op in (
        "aten::topk",
        "aten::sort",
        "aten::softmax",
        "aten::_softmax",
        "aten::logsumexp",
        "aten::cumsum",
        "aten::searchsorted",
        "aten::exp",
        "aten::amax",
        "aten::masked_fill",
        "aten::rand",
        "aten::gather",
    ):
        return "choosing tokens (top-p, log-probs)"
    if op.startswith("aten::"):
        return "other tensor ops (norms, rotary, cache writes, copies)"
    return "Python overhead"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per side and case (default 5)")
    parser.add_argument("--profile", action="store_true", help="profile one call of ours instead")
    parser.add_argument("--dtype", default="auto", help="our local backend's dtype: auto (device.py), fp32 or bf16")
    args = parser.parse_args()

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from cookbook_engine import device
    from cookbook_engine.backends.local import LocalServiceClient

    models.prepare_default_model()
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    prompt = common.chat_prompt(tokenizer)
    load_start = common.load_average()
    print(f"threads {torch.get_num_threads()}, load average {load_start}, prompt {len(prompt)} tokens", flush=True)
    choice = device.choose("auto", dtype=args.dtype)
    print(f"ours: {choice.label}: {choice.reason}", flush=True)
    service = LocalServiceClient(dtype=args.dtype)
    ours_base = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    if args.profile:
        common.write_result("sample_group_profile", {"load_average_start": load_start, **profile(ours_base, prompt)})
        common.exit_after_profile()
    trainer, lora_path, lora_folder = lora_snapshot(service, tokenizer)
    folder = str(models.default_cache_dir())
    # The peer in each precision this CPU runs natively: fp32 always, bf16 where the CPU has bf16 units.
    peer_dtypes = {"fp32": torch.float32}
    if set(device.BF16_UNITS) & common.machine_flags():
        peer_dtypes["bf16"] = torch.bfloat16
    plain, peer_lora = {}, {}
    for name, dtype in peer_dtypes.items():
        plain[name] = common.on_model_worker(
            lambda dtype=dtype: AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
        )
        peer_lora[name] = common.on_model_worker(
            lambda dtype=dtype: PeftModel.from_pretrained(
                AutoModelForCausalLM.from_pretrained(folder, dtype=dtype), lora_folder
            ).eval()
        )

    lora_sampler = service.create_sampling_client(model_path=lora_path).result()
    checks = {
        "greedy_tokens_equal_to_generate_fp32_base": greedy_agreement(ours_base, plain["fp32"], prompt),
        "greedy_tokens_equal_to_generate_fp32_lora": greedy_agreement(lora_sampler, peer_lora["fp32"], prompt),
    }
    print(f"greedy tokens equal to generate in fp32 (of {GREEDY_TOKENS}): {checks}", flush=True)

    ours_call(ours_base, prompt, 0)  # warm-up: builds the base model's decoder weights once
    for name in peer_dtypes:
        peer_call(plain[name], prompt, 0)
        peer_call(peer_lora[name], prompt, 0)
    calls: dict[str, list[tuple[float, int]]] = {k: [] for k in ("ours_base", "ours_lora_cold", "ours_lora_warm")}
    for name in peer_dtypes:
        calls[f"peer_base_{name}"], calls[f"peer_lora_{name}"] = [], []
    for repeat in range(args.repeats):
        seed = 100 + repeat
        calls["ours_base"].append(ours_call(ours_base, prompt, seed))
        for name in peer_dtypes:
            calls[f"peer_base_{name}"].append(peer_call(plain[name], prompt, seed))
        snapshot = trainer.save_weights_and_get_sampling_client().result()  # a new sampler, as after each RL step
        calls["ours_lora_cold"].append(ours_call(snapshot, prompt, seed))
        calls["ours_lora_warm"].append(ours_call(snapshot, prompt, seed + 1))
        for name in peer_dtypes:
            calls[f"peer_lora_{name}"].append(peer_call(peer_lora[name], prompt, seed))
        print(
            f"  repeat {repeat}: "
            + ", ".join(f"{k} {n / s:.1f} tok/s" for k, ((s, n),) in ((k, v[-1:]) for k, v in calls.items())),
            flush=True,
        )
    trainer.close()

    tok_s = {k: common.median([n / s for s, n in v]) for k, v in calls.items()}
    fastest = {case: max(peer_dtypes, key=lambda name: tok_s[f"peer_{case}_{name}"]) for case in ("base", "lora")}
    peer_base, peer_lora_tok_s = tok_s[f"peer_base_{fastest['base']}"], tok_s[f"peer_lora_{fastest['lora']}"]
    base_ratio = tok_s["ours_base"] / peer_base
    warm_ratio, cold_ratio = tok_s["ours_lora_warm"] / peer_lora_tok_s, tok_s["ours_lora_cold"] / peer_lora_tok_s
    rows = [
        [
            "base model",
            " / ".join(f"{tok_s[f'peer_base_{name}']:.1f}" for name in peer_dtypes),
            tok_s["ours_base"],
            "-",
            f"{base_ratio:.2f}x (vs {fastest['base']})",
        ],
        [
            "LoRA r=32 snapshot",
            " / ".join(f"{tok_s[f'peer_lora_{name}']:.1f}" for name in peer_dtypes),
            tok_s["ours_lora_warm"],
            tok_s["ours_lora_cold"],
            f"{warm_ratio:.2f}x (cold {cold_ratio:.2f}x; vs {fastest['lora']})",
        ],
    ]
    common.print_table(
        f"Group sampling, generated tokens/s ({SAMPLES} x {NEW_TOKENS}, T={TEMPERATURE}, "
        f"top_p={TOP_P}; median of {args.repeats}; ours {choice.label})",
        ["case", f"generate tok/s ({' / '.join(peer_dtypes)})", "ours tok/s", "ours cold tok/s", "ours/fastest"],
        rows,
    )
    common.write_result(
        "sample_group",
        {
            "setup": {
                "model": models.DEFAULT_MODEL,
                "ours_dtype": choice.label,
                "ours_dtype_reason": choice.reason,
                "peer_dtypes": list(peer_dtypes),
                "fastest_peer_dtype": fastest,
                "samples": SAMPLES,
                "new_tokens": NEW_TOKENS,
                "temperature": TEMPERATURE,
                "top_p": TOP_P,
                "top_k": 0,
                "prompt_tokens": len(prompt),
                "repeats": args.repeats,
                "lora_rank": RANK,
            },
            "load_average_start": load_start,
            "checks": checks,
            "tok_s": tok_s,
            "ratios": {"base": base_ratio, "lora_warm": warm_ratio, "lora_cold": cold_ratio},
            "calls_seconds_tokens": calls,
        },
    )


if __name__ == "__main__":
    main()
