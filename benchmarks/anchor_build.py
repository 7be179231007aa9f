"""Benchmark: how long scoring a whole anchor takes (training/anchor.py: every anchor chat scored once by the base
model, `sample(..., topk_prompt_logprobs=20)`; a run scores the chats as its steps use them), with the local
backend's top-K scoring packed (many prompts a forward pass, PROMPT_PACK_TOKENS) against one prompt a pass
(PROMPT_PACK_TOKENS=1, what it did before), in one process, alternating. Also times the same requests without top-K
(the sampling's own share) and checks that the two ways give the same datums.

    .venv/bin/python benchmarks/anchor_build.py [--repeats 2] [--dataset builtin:replay]

Not a test: it prints a table and writes benchmarks/results/anchor_build.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("COOKBOOK_HOME", str(Path(tempfile.gettempdir()) / "cookbook-bench-home"))

import common  # noqa: E402  (sets sys.path for the engine)
import numpy as np  # noqa: E402
from tinker import types  # noqa: E402

from cookbook_engine import (  # noqa: E402
    config as cfg,  # noqa: E402
    models,
    renderers,
)
from cookbook_engine.backends import local  # noqa: E402
from cookbook_engine.training import anchor, reference  # noqa: E402


def timed_build(config, service, pack_tokens: int) -> tuple[float, anchor.Anchor]:
    local.PROMPT_PACK_TOKENS = pack_tokens
    started = time.perf_counter()
    built = asyncio.run(anchor.build(config, service))
    assert built is not None
    asyncio.run(built.datums(list(range(len(built.examples)))))
    return time.perf_counter() - started, built


def timed_sampling_only(config, service) -> float:
    """The same requests with no top-K asked: the prefill and one sampled token a chat."""
    renderer = renderers.get_renderer(config.renderer, models.load_tokenizer(config.model))
    base = reference.sampling_client_for(service, config.model, reference.BASE)
    prompts = [renderer.build_supervised_example(c, "last_assistant_message")[0] for c in anchor.conversations(config)]
    params = types.SamplingParams(max_tokens=1, temperature=1.0)

    async def run():
        await asyncio.gather(*[base.sample_async(types.ModelInput.from_ints(list(p)), 1, params) for p in prompts])

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dataset", default="builtin:replay")
    args = parser.parse_args()
    config = cfg.parse_overrides("sl", [f"anchor.dataset={args.dataset}"])
    service = local.LocalServiceClient()
    packed_pass = local.PROMPT_PACK_TOKENS
    chats = len(anchor.conversations(config))
    timed_build(config, service, packed_pass)  # warm-up: the model loaded, the kernels calibrated
    seconds: dict[str, list[float]] = {"packed": [], "one prompt a pass": [], "sampling only": []}
    builds = {}
    for _ in range(args.repeats):
        for name, pack in (("packed", packed_pass), ("one prompt a pass", 1)):
            took, builds[name] = timed_build(config, service, pack)
            seconds[name].append(took)
        seconds["sampling only"].append(timed_sampling_only(config, service))
    local.PROMPT_PACK_TOKENS = packed_pass
    differences = [
        float(np.abs(a.loss_fn_inputs["weights"].to_numpy() - b.loss_fn_inputs["weights"].to_numpy()).max())
        for a, b in zip(builds["packed"].data.values(), builds["one prompt a pass"].data.values())
    ]
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    rows = [[name, medians[name], f"{medians['one prompt a pass'] / medians[name]:.2f}x"] for name in seconds]
    title = f"anchor build of {args.dataset} ({chats} chats), medians of {args.repeats}, load {common.load_average()}"
    common.print_table(title, ["side", "seconds", "one prompt a pass / this"], rows)
    print(f"largest difference between the two builds' anchor weights: {max(differences):.2e}")
    common.write_result(
        "anchor_build",
        {
            "dataset": args.dataset,
            "chats": chats,
            "seconds": seconds,
            "medians": medians,
            "max_weight_difference": max(differences),
        },
    )


if __name__ == "__main__":
    main()
