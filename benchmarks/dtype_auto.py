"""Does `dtype=auto` make anything slower than fp32 on this CPU? Training, sampling and evaluation, side by side.

Where the CPU has bf16 units (`amx_bf16` or `avx512_bf16`) and the calibration confirms bf16 matmuls are faster,
`dtype=auto` trains in bf16 (cookbook_engine/device.py); everywhere else it is fp32 and this script has nothing to
compare. It holds two local backends in one process, one forced to fp32 and one on auto, and times in alternation
(fp32, auto, fp32, auto, ...):

- a LoRA SFT step (rank 32, 8 chat examples of 64-280 tokens, forward_backward + optim_step): trained tokens/s;
- group sampling (8 samples x 64 tokens from one chat prompt, T=0.7, top_p 0.9) from the base model and from a
  LoRA snapshot made just before (cold: its decoder is built in the call) and again (warm): generated tokens/s;
- `cookbook eval`'s evaluator on builtin:arithmetic (100 prompts, greedy): examples/s, and its accuracy.

Reports medians and the auto/fp32 ratio of each, with the CPU, its bf16 flags, what auto chose and why, and the
load average. Issue 26 asks that nothing be slower where auto picks bf16.

    .venv/bin/python benchmarks/dtype_auto.py [--repeats 3]

Not a test: prints a table and writes benchmarks/results/dtype_auto.json.
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
from tinker import types  # noqa: E402

from cookbook_engine import device, models  # noqa: E402
from cookbook_engine.evals import evaluators, sets  # noqa: E402
from cookbook_engine.renderers import get_renderer  # noqa: E402
from cookbook_engine.training.common import datum_from_tokens  # noqa: E402

RANK = 32
BATCH = 8
SAMPLES, NEW_TOKENS, TEMPERATURE, TOP_P = 8, 64, 0.7, 0.9
EVAL_SET = "builtin:arithmetic"


class Side:
    """One backend (fp32 or auto) with a LoRA training client and the base model's sampler."""

    def __init__(self, dtype: str, examples):
        from cookbook_engine.backends.local import LocalServiceClient

        self.service = LocalServiceClient(dtype=dtype)
        self.label = self.service.compute.label
        self.reason = self.service.compute.reason
        self.trainer = self.service.create_lora_training_client(models.DEFAULT_MODEL, rank=RANK, seed=0).result()
        self.base = self.service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
        self.examples = examples
        self.batch_index = 0

    def sft_step(self) -> float:
        """Trained tokens per second of one step on the next batch."""
        batch = self.examples[(self.batch_index % 4) * BATCH : (self.batch_index % 4 + 1) * BATCH]
        self.batch_index += 1
        data = [datum_from_tokens(tokens, weights) for tokens, weights in batch]
        started = time.perf_counter()
        self.trainer.forward_backward(data, "cross_entropy").result()
        self.trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result()
        return sum(len(tokens) for tokens, _ in batch) / (time.perf_counter() - started)

    def sample(self, client, prompt: list[int], seed: int) -> float:
        params = types.SamplingParams(max_tokens=NEW_TOKENS, temperature=TEMPERATURE, top_p=TOP_P, seed=seed, stop=[])
        started = time.perf_counter()
        response = client.sample(types.ModelInput.from_ints(prompt), SAMPLES, params).result()
        return sum(len(s.tokens) for s in response.sequences) / (time.perf_counter() - started)

    def evaluate(self, renderer, eval_set) -> tuple[float, float]:
        started = time.perf_counter()
        result = asyncio.run(evaluators.evaluate(self.base, renderer, eval_set, evaluators.EvalSettings()))
        return len(eval_set.examples) / (time.perf_counter() - started), result.metric("accuracy").value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds, each side in turn (default 3)")
    args = parser.parse_args()

    models.prepare_default_model()
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    renderer = get_renderer("auto", tokenizer)
    prompt = common.chat_prompt(tokenizer)
    examples = common.chat_examples(tokenizer, 4 * BATCH, max_tokens=280)
    eval_set = sets.load_eval_set(EVAL_SET)
    flags = sorted(set(device.BF16_UNITS) & device.Probes().cpu_flags())
    load_start = common.load_average()
    print(f"{common.machine()['cpu']}, bf16 flags {flags or 'none'}, load {load_start}", flush=True)
    sides = {"fp32": Side("fp32", examples), "auto": Side("auto", examples)}
    print(f"auto: {sides['auto'].label}: {sides['auto'].reason}", flush=True)
    if sides["auto"].label == sides["fp32"].label:
        print("auto chose fp32 here: nothing to compare")
    for side in sides.values():  # warm-up: a step, a sample (builds the base decoder), a short evaluation
        side.sft_step()
        side.sample(side.base, prompt, 0)
        small = sets.EvalSet(eval_set.name, eval_set.kind, "", eval_set.examples[:8], max_tokens=eval_set.max_tokens)
        side.evaluate(renderer, small)

    figures: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    accuracy: dict[str, float] = {}
    for repeat in range(args.repeats):
        for name, side in sides.items():
            row = figures[name]
            row.setdefault("sft_tokens_s", []).append(side.sft_step())
            row.setdefault("sample_base_tokens_s", []).append(side.sample(side.base, prompt, 100 + repeat))
            snapshot = side.trainer.save_weights_and_get_sampling_client().result()
            row.setdefault("sample_lora_cold_tokens_s", []).append(side.sample(snapshot, prompt, 200 + repeat))
            row.setdefault("sample_lora_warm_tokens_s", []).append(side.sample(snapshot, prompt, 300 + repeat))
            examples_s, accuracy[name] = side.evaluate(renderer, eval_set)
            row.setdefault("eval_examples_s", []).append(examples_s)
            print(f"  round {repeat} {name}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in row.items()), flush=True)
    load_end = common.load_average()
    medians = {name: {k: common.median(v) for k, v in row.items()} for name, row in figures.items()}
    rows = [
        [what, medians["fp32"][what], medians["auto"][what], f"{medians['auto'][what] / medians['fp32'][what]:.2f}x"]
        for what in medians["fp32"]
    ]
    rows.append(["eval accuracy", accuracy["fp32"], accuracy["auto"], "-"])
    common.print_table(
        f"fp32 against dtype=auto ({sides['auto'].label}), median of {args.repeats}; load {load_start} -> {load_end}",
        ["figure", "fp32", "auto", "auto/fp32"],
        rows,
    )
    common.write_result(
        "dtype_auto",
        {
            "setup": {"model": models.DEFAULT_MODEL, "rank": RANK, "batch": BATCH, "eval_set": EVAL_SET},
            "bf16_flags": flags,
            "auto": {"label": sides["auto"].label, "reason": sides["auto"].reason},
            "load_average": {"start": load_start, "end": load_end},
            "figures": figures,
            "medians": medians,
            "accuracy": accuracy,
        },
    )


if __name__ == "__main__":
    main()
