"""Benchmark: an RL step's forward_backward with each group's prompt run once (packing.py) against run per sample.

The batch is the RL default's: 8 two-digit sums (rl/arithmetic.py's training draw at the last step) x 8 replies
sampled from the base model at temperature 1.0, 16 tokens, the importance_sampling loss with advantages of +1 or -1
on the replies, LoRA rank 32, dtype=auto. A DPO-shaped batch rides along: 16 pairs of replies to 16 prompts (the
same prompts' first two samples), cross_entropy on the replies. Calls alternate (shared, apart, shared, ...) after a
warm-up of each; "apart" sets packing.MIN_SHARED past any prompt, which is the packed path before sharing. Figures
are medians of seconds per forward_backward; the ratio is apart / shared, measured in one run, so it holds under
whatever load the machine had (printed beside it).

    .venv/bin/python benchmarks/shared_prefix.py [--repeats 5]

Not a test: it prints a table and writes benchmarks/results/shared_prefix.json.
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
from cookbook_engine.backends import packing  # noqa: E402
from cookbook_engine.backends.local import LocalServiceClient  # noqa: E402
from cookbook_engine.renderers import get_renderer  # noqa: E402
from cookbook_engine.rl import arithmetic  # noqa: E402

GROUPS, SAMPLES, MAX_TOKENS, RANK = 8, 8, 16, 32


def rl_batch(service, tokenizer) -> tuple[list[types.Datum], list[types.Datum]]:
    """The RL batch (importance_sampling datums) and the DPO-shaped one (cross_entropy datums) from sampled replies."""
    renderer = get_renderer("auto", tokenizer)
    sampler = service.create_sampling_client(base_model=models.DEFAULT_MODEL)
    problems = arithmetic.training_problems(seed=0, step=35, total_steps=36, count=GROUPS)
    rl, dpo = [], []
    for problem in problems:
        prompt = renderer.build_generation_prompt([{"role": "user", "content": problem.question}]).to_ints()
        params = types.SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0)
        response = sampler.sample(types.ModelInput.from_ints(prompt), SAMPLES, params).result()
        for index, sequence in enumerate(response.sequences):
            tokens = prompt + list(sequence.tokens)
            n = len(tokens) - 1
            reply_T = torch.tensor([0.0] * (len(prompt) - 1) + [1.0] * len(sequence.tokens))
            advantage = 1.0 if index % 2 else -1.0
            target_T = torch.tensor(tokens[1:])
            rl.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": types.TensorData.from_torch(target_T),
                        "logprobs": types.TensorData.from_torch(torch.zeros(n)),
                        "advantages": types.TensorData.from_torch(reply_T * advantage),
                    },
                )
            )
            if index < 2:
                dpo.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={
                            "target_tokens": types.TensorData.from_torch(target_T),
                            "weights": types.TensorData.from_torch(reply_T),
                        },
                    )
                )
    return rl, dpo


def unweighted_prefix(datum: types.Datum) -> int:
    """Where the datum's loss starts: its first nonzero advantage or weight."""
    key = "advantages" if "advantages" in datum.loss_fn_inputs else "weights"
    return int((datum.loss_fn_inputs[key].to_torch() != 0).nonzero()[0, 0])


def timed(client, data, loss_fn: str, shared: bool) -> float:
    previous = packing.MIN_SHARED
    packing.MIN_SHARED = previous if shared else 10**9
    try:
        started = time.perf_counter()
        client.forward_backward(data, loss_fn).result()
        return time.perf_counter() - started
    finally:
        packing.MIN_SHARED = previous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    models.prepare_default_model()
    service = LocalServiceClient()
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=RANK, seed=0).result()
    rl, dpo = rl_batch(service, tokenizer)
    rows, payload = [], {"load_average_start": common.load_average(), "cases": {}}
    cases = [("RL step, 8 x 8", rl, "importance_sampling"), ("DPO pairs, 8 x 2", dpo, "cross_entropy")]
    for name, data, loss_fn in cases:
        tokens = sum(d.model_input.length for d in data)
        layout = packing.pack([d.model_input.to_ints() for d in data], [unweighted_prefix(d) for d in data])
        timed(client, data, loss_fn, True), timed(client, data, loss_fn, False)  # warm-up
        shared_s, apart_s = [], []
        for _ in range(args.repeats):
            shared_s.append(timed(client, data, loss_fn, True))
            apart_s.append(timed(client, data, loss_fn, False))
        shared, apart = common.median(shared_s), common.median(apart_s)
        rows.append([name, tokens, len(layout.ids), f"{apart:.2f}", f"{shared:.2f}", f"{apart / shared:.2f}x"])
        payload["cases"][name] = {
            "tokens": tokens,
            "packed_tokens_shared": len(layout.ids),
            "apart_s": apart_s,
            "shared_s": shared_s,
            "speedup": apart / shared,
        }
    common.print_table(
        f"forward_backward, median of {args.repeats} (model dtype {next(client._worker.model.parameters()).dtype})",
        ["batch", "tokens", "packed with shared prompts", "apart s", "shared s", "speed-up"],
        rows,
    )
    common.write_result("shared_prefix", payload)


if __name__ == "__main__":
    main()
