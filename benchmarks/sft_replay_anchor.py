"""A regulariser tried for the SFT demo's retention (issue 23): the replay rows anchored to the base model's own
log-probabilities instead of (or beside) being trained on with cross-entropy. Numbers: benchmarks/README.md.

The demo's rows (the Quorvania facts FACTS_COPIES times and the replay rows, builtin:facts without its held-out
split) train one epoch at the demo's settings through the local backend's `forward_backward_custom`, the tinker API's
custom loss, so the same loss would run on the hosted service: on a facts row the summed cross-entropy, on a replay
row `coef` x the summed squared log-ratio between the trained and the base model's log-probability of each reply
token (zero where the model still gives the base model's reply the base model's probability; the base
log-probabilities are the fresh adapter's, read before the first step), plus `ce` x its cross-entropy. Then
sft_retention_sweep.measure() asks builtin:facts-probes and builtin:retention, greedy, batched.

Not the demo's loss (that is plain cross-entropy on every row): this script only measures whether the anchor keeps
more of what the model knew. Not a timed test.

Run (one configuration per argument, several minutes each on a 2-core CPU):
    .venv/bin/python benchmarks/sft_replay_anchor.py coef=1,ce=0 coef=10,ce=0
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path

import common
import sft_retention_sweep
import torch

from cookbook_engine import renderers
from cookbook_engine.backends import compat, service_client
from cookbook_engine.config import SLConfig
from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.sl.data import render_examples
from cookbook_engine.training.common import adam_params, lr_multiplier, tokenizer_for
from cookbook_engine.training.learning_rate import learning_rate
from cookbook_engine.training.lora_a import rank_used


def anchored_loss(is_replay_D: list[bool], base_logprobs: dict[int, torch.Tensor], coef: float, ce: float):
    """The custom loss of one batch: cross-entropy on facts rows, the squared log-ratio anchor on replay rows."""

    def loss_fn(data, logprobs_D):
        total = torch.zeros(())
        for datum, logprobs, is_replay in zip(data, logprobs_D, is_replay_D, strict=True):
            weights = datum.loss_fn_inputs["weights"].to_torch().float()
            nll = -(logprobs * weights).sum()
            if is_replay:
                ratio = logprobs.float() - base_logprobs[id(datum)]
                total = total + coef * (weights * ratio * ratio).sum() + ce * nll
            else:
                total = total + nll
        return total, {}

    return loss_fn


def train(coef: float, ce: float) -> tuple[Path, float]:
    config = SLConfig(dataset="builtin:facts")
    renderer = renderers.get_renderer(config.renderer, tokenizer_for(config))
    facts_rows = builtin_data.fact_rows_only() * builtin_data.FACTS_COPIES
    replay_rows = builtin_data.replay_rows()[: builtin_data.FACTS_REPLAY_ROWS]
    facts_D = render_examples([row["messages"] for row in facts_rows], renderer, config)[0]
    replay_D = render_examples([row["messages"] for row in replay_rows], renderer, config)[0]
    service = service_client("local", device=config.device, dtype=config.dtype)
    client = service.create_lora_training_client(config.model, rank=rank_used(config), seed=config.seed).result()
    base_logprobs = {}
    for start in range(0, len(replay_D), 16):  # the fresh adapter is zero: these are the base model's
        chunk = replay_D[start : start + 16]
        for datum, out in zip(chunk, client.forward(chunk, "cross_entropy").result().loss_fn_outputs, strict=True):
            base_logprobs[id(datum)] = out["logprobs"].to_torch().float()
    rows = [(d, False) for d in facts_D] + [(d, True) for d in replay_D]
    random.Random(0).shuffle(rows)
    steps, rate = len(rows) // config.batch_size, learning_rate(config)
    started = time.perf_counter()
    for step in range(steps):
        batch = rows[step * config.batch_size : (step + 1) * config.batch_size]
        loss_fn = anchored_loss([is_replay for _, is_replay in batch], base_logprobs, coef, ce)
        client.forward_backward_custom([d for d, _ in batch], loss_fn).result()
        client.optim_step(adam_params(config, rate * lr_multiplier(config.lr_schedule, step, steps))).result()
    path = client.save_weights_for_sampler("final").result().path
    return compat.resolve(path), (time.perf_counter() - started) / 60


def main() -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    os.environ.setdefault("COOKBOOK_HOME", tempfile.mkdtemp(prefix="cookbook-sft-anchor-"))
    results = []
    for spec in sys.argv[1:]:
        settings = dict(part.split("=", 1) for part in spec.split(","))
        adapter, minutes = train(float(settings.get("coef", "1")), float(settings.get("ce", "0")))
        result = {"config": spec, "minutes": minutes, **sft_retention_sweep.measure(adapter)}
        results.append(result)
        print(sft_retention_sweep.summary(spec, result), flush=True)
    common.write_result("sft_replay_anchor", {"results": results})


if __name__ == "__main__":
    main()
