"""Benchmark: LoRA SFT throughput of the local backend against TRL's SFTTrainer with peft, side by side.

Same model (SmolLM2-135M-Instruct, fp32), same chat data (64-280 tokens, loss on the assistant reply only), same
LoRA (rank 32, alpha 32, all 7 projections, no dropout), batch size 8, max length 280, same steps. TRL runs in its
default configuration (fp32, i.e. bf16 off) and in its fastest one on this CPU; each TRL run records the batches
its sampler drew and the initial LoRA weights, and ours then trains from those weights on exactly those batches
with TRL's optimizer recipe (AdamW betas 0.9/0.999, eps 1e-8, linear decay, clip 1.0, mean token loss), so the
per-step losses of the two must agree: that shows the work is equal. Runs alternate (TRL, ours, TRL, ours, ...)
and the figures are medians over repetitions. Everything runs on the local backend's model worker thread, TRL
included (see common.on_model_worker). Throughput counts the examples' tokens (no padding) per second of
step time, the first step of every run left out as warm-up. MFU = 4 x parameters x tokens/s over this machine's
measured fp32 matmul peak.

    .venv/bin/python benchmarks/train_sft.py              # the comparison (about 5 minutes)
    .venv/bin/python benchmarks/train_sft.py --explore    # time several TRL configurations to find its fastest
    .venv/bin/python benchmarks/train_sft.py --profile    # where a step of ours spends its time
    .venv/bin/python benchmarks/train_sft.py --ablation   # what each fast path adds, on the same batches

Not a test: it prints a table and writes benchmarks/results/train_sft.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("COOKBOOK_HOME", str(Path(tempfile.gettempdir()) / "cookbook-bench-home"))

import common  # noqa: E402  (sets sys.path for the engine)
import torch  # noqa: E402

from cookbook_engine import models  # noqa: E402

BATCH = 8
MAX_LENGTH = 280
RANK = 32
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LEARNING_RATE = 1e-3

TRL_DEFAULT = {"name": "TRL default", "overrides": {}}
TRL_FASTEST = {
    "name": "TRL fastest (group_by_length, no grad checkpointing)",
    "overrides": {"train_sampling_strategy": "group_by_length", "gradient_checkpointing": False},
}
# On a CPU with bf16 units TRL's fastest adds bf16 (`bf16=True, use_cpu=True`, its documented CPU recipe) with the
# model loaded in bf16: 152 tok/s against 128 with bf16 autocast over fp32 weights and 121 in fp32 (--explore, Intel
# Xeon with AMX, 2026-11-28).
TRL_FASTEST_BF16 = {
    "name": "TRL fastest + bf16 (model loaded in bf16)",
    "overrides": {**TRL_FASTEST["overrides"], "bf16": True, "use_cpu": True},
    "model_dtype": torch.bfloat16,
}
TRL_EXPLORE = [
    TRL_DEFAULT,
    {"name": "no grad checkpointing", "overrides": {"gradient_checkpointing": False}},
    {"name": "group_by_length", "overrides": {"train_sampling_strategy": "group_by_length"}},
    TRL_FASTEST,
    {
        "name": "padding_free, no grad checkpointing",
        "overrides": {"padding_free": True, "max_length": None, "gradient_checkpointing": False},
    },
    {"name": "packing, no grad checkpointing", "overrides": {"packing": True, "gradient_checkpointing": False}},
    {"name": "TRL fastest + bf16 autocast (fp32 weights)", "overrides": TRL_FASTEST_BF16["overrides"]},
    TRL_FASTEST_BF16,
    {
        "name": "padding_free + bf16 (model loaded in bf16), no grad checkpointing",
        "overrides": {
            "padding_free": True,
            "max_length": None,
            "gradient_checkpointing": False,
            "bf16": True,
            "use_cpu": True,
        },
        "model_dtype": torch.bfloat16,
    },
]


def load_examples(tokenizer, count: int):
    return common.chat_examples(tokenizer, count, min_tokens=64, max_tokens=MAX_LENGTH, seed=0)


# ----------------------------------------------------------------------------------------------------- TRL


class _StepClock:
    """A TrainerCallback that times each optimizer step, and a compute_loss wrapper that keeps each step's loss
    (the logged one is rounded)."""

    def __init__(self):
        from transformers import TrainerCallback

        clock = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                clock.started = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                clock.step_seconds.append(time.perf_counter() - clock.started)

        self.callback = Callback()
        self.step_seconds: list[float] = []
        self.losses: list[float] = []
        self.started = 0.0

    def wrap_loss(self, trainer) -> None:
        compute_loss = trainer.compute_loss

        def wrapped(model, inputs, return_outputs=False, num_items_in_batch=None):
            out = compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
            self.losses.append(float((out[0] if return_outputs else out).detach()))
            return out

        trainer.compute_loss = wrapped


class _RecordingCollator:
    """Wraps TRL's collator and keeps each batch's examples (input_ids, labels) in order."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def __call__(self, examples):
        self.batches.append([(list(e["input_ids"]), list(e["labels"])) for e in examples])
        return self.inner(examples)


def run_trl(config: dict, examples, tokenizer, steps: int) -> dict:
    """One TRL run, loaded and trained on the model worker's thread (common.on_model_worker says why)."""
    return common.on_model_worker(lambda: _run_trl(config, examples, tokenizer, steps))


def _run_trl(config: dict, examples, tokenizer, steps: int) -> dict:
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    model = AutoModelForCausalLM.from_pretrained(
        str(models.default_cache_dir()), dtype=config.get("model_dtype", torch.float32)
    )
    dataset = Dataset.from_dict(
        {
            "input_ids": [t for t, _ in examples],
            "completion_mask": [[int(w > 0) for w in weights] for _, weights in examples],
        }
    )
    with tempfile.TemporaryDirectory() as out:
        settings = {"max_length": MAX_LENGTH, "bf16": False, "fp16": False, **config["overrides"]}
        args = SFTConfig(
            output_dir=out,
            per_device_train_batch_size=BATCH,
            max_steps=steps,
            learning_rate=LEARNING_RATE,
            completion_only_loss=True,
            logging_steps=10_000,
            save_strategy="no",
            report_to="none",
            seed=0,
            dataloader_num_workers=0,
            disable_tqdm=True,
            **settings,
        )
        peft_config = LoraConfig(
            r=RANK, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS, bias="none", task_type="CAUSAL_LM"
        )
        trainer = SFTTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config
        )
        initial_lora = {k: v.detach().clone() for k, v in get_peft_model_state_dict(trainer.model).items()}
        recorder = _RecordingCollator(trainer.data_collator)
        trainer.data_collator = recorder
        clock = _StepClock()
        trainer.add_callback(clock.callback)
        clock.wrap_loss(trainer)
        trainer.train()
    return {
        "step_seconds": clock.step_seconds,
        "losses": clock.losses,
        "batches": recorder.batches,
        "initial_lora": initial_lora,
    }


# ----------------------------------------------------------------------------------------------------- ours


def run_ours(batches, initial_lora: dict, steps: int, dtype: str) -> dict:
    """Our backend (in `dtype`: auto, fp32 or bf16) on TRL's batches from TRL's initial LoRA weights, with TRL's
    optimizer recipe."""
    from tinker import types

    from cookbook_engine.backends.local import LocalServiceClient, save_adapter_folder
    from cookbook_engine.training.common import datum_from_tokens

    service = LocalServiceClient(dtype=dtype)
    with tempfile.TemporaryDirectory() as folder:
        save_adapter_folder(Path(folder), initial_lora, models.DEFAULT_MODEL, RANK, TARGETS)
        client = service.create_training_client_from_state(folder).result()
    step_seconds, losses = [], []
    for step, batch in enumerate(batches[:steps]):
        loss_tokens = sum(sum(1 for label in labels[1:] if label != -100) for _, labels in batch)
        data = [
            datum_from_tokens(tokens, [1.0 / loss_tokens if label != -100 else 0.0 for label in labels])
            for tokens, labels in batch
        ]
        adam = types.AdamParams(
            learning_rate=LEARNING_RATE * (1 - step / steps),
            beta1=0.9,
            beta2=0.999,
            eps=1e-8,
            weight_decay=0.0,
            grad_clip_norm=1.0,
        )
        started = time.perf_counter()
        result = client.forward_backward(data, "cross_entropy").result()
        client.optim_step(adam).result()
        step_seconds.append(time.perf_counter() - started)
        losses.append(result.metrics["loss:sum"])
    client.close()
    return {"step_seconds": step_seconds, "losses": losses}


# --------------------------------------------------------------------------------------------------- figures


def tokens_per_second(batches, step_seconds: list[float]) -> float:
    """Examples' tokens over step time, the first step (warm-up) left out."""
    tokens = sum(len(tokens) for batch in batches[1 : len(step_seconds)] for tokens, _ in batch)
    return tokens / sum(step_seconds[1:])


def padding_fraction(batches) -> float:
    real = sum(len(t) for batch in batches for t, _ in batch)
    padded = sum(len(batch) * max(len(t) for t, _ in batch) for batch in batches)
    return 1 - real / padded


def compare(repeats: int, steps: int, examples, tokenizer, peak: dict, dtype: str, with_bf16: bool) -> dict:
    params = _parameter_count()
    runs: dict[str, list[dict]] = defaultdict(list)
    configs = (TRL_DEFAULT, TRL_FASTEST, TRL_FASTEST_BF16) if with_bf16 else (TRL_DEFAULT, TRL_FASTEST)
    for repeat in range(repeats):
        for config in configs:
            trl = run_trl(config, examples, tokenizer, steps)
            ours = run_ours(trl["batches"], trl["initial_lora"], steps, dtype)
            batches = trl["batches"][:steps]
            record = {
                "repeat": repeat,
                "trl_tok_s": tokens_per_second(batches, trl["step_seconds"]),
                "ours_tok_s": tokens_per_second(batches, ours["step_seconds"]),
                "trl_step_seconds": trl["step_seconds"],
                "ours_step_seconds": ours["step_seconds"],
                "trl_losses": trl["losses"],
                "ours_losses": ours["losses"],
                "padding_fraction": padding_fraction(batches),
                "tokens_per_step": [sum(len(t) for t, _ in batch) for batch in batches],
                "load_average": common.load_average(),
            }
            runs[config["name"]].append(record)
            print(
                f"  repeat {repeat} {config['name']}: TRL {record['trl_tok_s']:.1f} tok/s, ours "
                f"{record['ours_tok_s']:.1f} tok/s, loss TRL {_fmt(trl['losses'])} ours {_fmt(ours['losses'])}",
                flush=True,
            )
    summary = {}
    for name, records in runs.items():
        trl_tok_s = common.median([r["trl_tok_s"] for r in records])
        ours_tok_s = common.median([r["ours_tok_s"] for r in records])
        loss_gap = max(abs(a - b) for r in records for a, b in zip(r["trl_losses"], r["ours_losses"]))
        summary[name] = {
            "trl_tok_s": trl_tok_s,
            "ours_tok_s": ours_tok_s,
            "ratio": ours_tok_s / trl_tok_s,
            "trl_mfu": 4 * params * trl_tok_s / (peak["peak"] * 1e9),
            "ours_mfu": 4 * params * ours_tok_s / (peak["peak"] * 1e9),
            "trl_mfu_bf16": 4 * params * trl_tok_s / (peak["bf16_peak"] * 1e9),
            "ours_mfu_bf16": 4 * params * ours_tok_s / (peak["bf16_peak"] * 1e9),
            "max_loss_difference": loss_gap,
            "trl_losses_first_run": records[0]["trl_losses"],
            "ours_losses_first_run": records[0]["ours_losses"],
            "padding_fraction": common.median([r["padding_fraction"] for r in records]),
        }
    return {"parameters": params, "summary": summary, "runs": runs}


def _fmt(losses: list[float]) -> str:
    return "[" + ", ".join(f"{x:.4f}" for x in losses) + "]"


def _parameter_count() -> int:
    """The base model's parameters (LoRA matrices not counted), from the local backend's loaded model."""
    from cookbook_engine.backends.local import get_worker

    worker = get_worker(models.DEFAULT_MODEL)
    worker.call(lambda: None)  # loaded
    return sum(p.numel() for name, p in worker.model.named_parameters() if "lora_" not in name)


def explore(examples, tokenizer, steps: int) -> dict:
    results = {}
    for config in TRL_EXPLORE:
        trl = run_trl(config, examples, tokenizer, steps)
        results[config["name"]] = tokens_per_second(trl["batches"][:steps], trl["step_seconds"])
        print(f"  {config['name']}: {results[config['name']]:.1f} tok/s", flush=True)
    common.print_table(
        "TRL configurations (non-padding tokens per second)",
        ["configuration", "tok/s"],
        [[name, value] for name, value in results.items()],
    )
    return results


def profile(examples) -> dict:
    """One of our training steps under torch.profiler, operator time grouped into categories."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from cookbook_engine.backends.local import LocalServiceClient
    from cookbook_engine.training.common import datum_from_tokens

    client = LocalServiceClient().create_lora_training_client(models.DEFAULT_MODEL, rank=RANK, seed=0).result()
    batches = [examples[i : i + BATCH] for i in range(0, 3 * BATCH, BATCH)]
    for batch in batches[:2]:
        client.forward_backward([datum_from_tokens(t, w) for t, w in batch], "cross_entropy").result()
    data = [datum_from_tokens(t, w) for t, w in batches[2]]

    def job():
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            client._forward(data, "cross_entropy", None, backward=True)
        return prof

    prof = client._worker.call(job)
    tokens = sum(len(t) for t, _ in batches[2])
    categories = common.print_profile(
        f"Where one training step of ours spends its time ({tokens} tokens)", prof, _category
    )
    client.close()
    return {"seconds": categories, "tokens": tokens}


ABLATION = [
    ("padded batches, full logits, torch matmul (MKL), peft LoRA", {"packed": False, "onednn": False}),
    ("packed without padding, LM-head gradient only on loss tokens", {"packed": True, "onednn": False}),
    ("+ oneDNN matmuls and fused LoRA (the local backend)", {"packed": True, "onednn": True}),
]


def ablation(examples, steps: int, repeats: int) -> dict:
    """Our backend with its fast paths switched on one after another, alternating, on the same batches."""
    from tinker import types

    from cookbook_engine.backends import fast_ops
    from cookbook_engine.backends.local import LocalServiceClient
    from cookbook_engine.training.common import datum_from_tokens

    batches = [[(t, w) for t, w in examples[i : i + BATCH]] for i in range(0, steps * BATCH, BATCH)]
    service = LocalServiceClient()
    supports_packed, onednn = fast_ops.supports_packed, fast_ops.ONEDNN
    results: dict[str, list[float]] = defaultdict(list)
    try:
        for _ in range(repeats):
            for name, switches in ABLATION:
                fast_ops.ONEDNN = switches["onednn"] and onednn
                fast_ops.supports_packed = supports_packed if switches["packed"] else (lambda model: False)
                client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=RANK, seed=0).result()
                seconds = []
                for batch in batches:
                    started = time.perf_counter()
                    client.forward_backward([datum_from_tokens(t, w) for t, w in batch], "cross_entropy").result()
                    client.optim_step(types.AdamParams(learning_rate=1e-4)).result()
                    seconds.append(time.perf_counter() - started)
                client.close()
                results[name].append(tokens_per_second([[(t, None) for t, _ in b] for b in batches], seconds))
                print(f"  {name}: {results[name][-1]:.1f} tok/s", flush=True)
    finally:
        fast_ops.ONEDNN, fast_ops.supports_packed = onednn, supports_packed
    summary = {name: common.median(values) for name, values in results.items()}
    first = summary[ABLATION[0][0]]
    common.print_table(
        f"What each fast path adds (non-padding tokens/s, median of {repeats})",
        ["variant", "tok/s", "vs first"],
        [[name, value, f"{value / first:.2f}x"] for name, value in summary.items()],
    )
    return {"tok_s": summary, "runs": dict(results)}


def _category(op: str) -> str:
    if "linear_pointwise" in op or op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"):
        return "matmul (linear layers, LoRA, LM head)"
    if "scaled_dot_product" in op:
        return "attention (per-sequence SDPA)"
    if op in (
        "aten::exp_",
        "aten::exp",
        "aten::amax",
        "aten::sub_",
        "aten::logsumexp",
        "aten::scatter_add_",
        "aten::gather",
        "aten::mul_",
    ):
        return "LM-head log-softmax"
    if op.startswith("aten::"):
        return "other tensor ops (norms, rotary, activations, copies)"
    return "autograd and Python overhead"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="alternating repetitions (default 2)")
    parser.add_argument("--steps", type=int, default=4, help="steps per run, the first is warm-up (default 4)")
    parser.add_argument("--explore", action="store_true", help="time TRL configurations instead")
    parser.add_argument("--profile", action="store_true", help="profile one step of ours instead")
    parser.add_argument("--ablation", action="store_true", help="time our fast paths one by one instead")
    parser.add_argument("--dtype", default="auto", help="our local backend's dtype: auto (device.py), fp32 or bf16")
    args = parser.parse_args()

    models.prepare_default_model()
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    examples = load_examples(tokenizer, 512)
    load_start = common.load_average()
    print(f"threads {torch.get_num_threads()}, load average {load_start}", flush=True)
    if args.profile:
        common.write_result("train_sft_profile", {"load_average_start": load_start, **profile(examples)})
        common.exit_after_profile()
    if args.ablation:
        common.write_result(
            "train_sft_ablation",
            {"load_average_start": load_start, "steps": args.steps, **ablation(examples, args.steps, args.repeats)},
        )
        return
    if args.explore:
        common.write_result(
            "train_sft_trl_configs",
            {"load_average_start": load_start, "steps": args.steps, "tok_s": explore(examples, tokenizer, args.steps)},
        )
        return
    from cookbook_engine import device

    choice = device.choose("auto", dtype=args.dtype)
    with_bf16 = bool(set(device.BF16_UNITS) & common.machine_flags())  # TRL's bf16 recipe only where bf16 is native
    print(f"ours: {choice.label}: {choice.reason}", flush=True)
    peak = common.on_model_worker(common.matmul_peak_gflops)
    print(
        f"matmul peak: fp32 torch.mm {peak['torch_mm']:.0f}, oneDNN {peak['onednn']:.0f}; bf16 torch.mm "
        f"{peak['bf16_torch_mm']:.0f}, oneDNN {peak['bf16_onednn']:.0f} GFLOP/s",
        flush=True,
    )
    result = compare(args.repeats, args.steps, examples, tokenizer, peak, args.dtype, with_bf16)
    peak_after = common.on_model_worker(common.matmul_peak_gflops)
    rows = []
    for name, s in result["summary"].items():
        rows.append(
            [
                name,
                s["trl_tok_s"],
                s["ours_tok_s"],
                f"{s['ratio']:.2f}x",
                f"{s['trl_mfu']:.0%} / {s['trl_mfu_bf16']:.0%}",
                f"{s['ours_mfu']:.0%} / {s['ours_mfu_bf16']:.0%}",
                f"{s['padding_fraction']:.0%}",
                f"{s['max_loss_difference']:.1e}",
            ]
        )
    common.print_table(
        f"LoRA SFT, non-padding tokens/s (median of {args.repeats}; ours {choice.label}; MFU vs the fp32 / bf16 "
        f"peaks, {peak['peak']:.0f} / {peak['bf16_peak']:.0f} GFLOP/s)",
        ["peer", "peer tok/s", "ours tok/s", "ours/peer", "peer MFU", "ours MFU", "peer padding", "max |loss diff|"],
        rows,
    )
    common.write_result(
        "train_sft",
        {
            "setup": {
                "model": models.DEFAULT_MODEL,
                "ours_dtype": choice.label,
                "ours_dtype_reason": choice.reason,
                "batch_size": BATCH,
                "max_length": MAX_LENGTH,
                "lora_rank": RANK,
                "lora_targets": TARGETS,
                "steps_per_run": args.steps,
                "warmup_steps_excluded": 1,
                "repeats": args.repeats,
                "learning_rate": LEARNING_RATE,
                "data": "512 chat examples, 64-280 tokens, loss on the assistant reply",
            },
            "matmul_peak_gflops": peak,
            "matmul_peak_gflops_after": peak_after,
            "load_average_start": load_start,
            **result,
        },
    )


if __name__ == "__main__":
    main()
