"""An experiment for issue 23: the SFT demo's facts learned with the replay rows replaced by a KL anchor to the base
model. Each step trains one SL batch of the facts rows (cross-entropy) and, in the same optimizer step, the
student's own replies to `anchor` replay prompts, each token pushed by -coef * (student - base log-prob) with
`importance_sampling` (on-policy reverse KL to the base model, as `cookbook distill teacher=base` does). At the first
step the student is the base model, so the anchor's gradient is zero; it grows only where the facts move the model
elsewhere, unlike replay rows of the base model's greedy replies, whose cross-entropy sharpens the model even alone
(those rows alone lost 5.3 points of retention: docs/DEFAULTS.md).

Measures facts-probes and builtin:retention with sft_retention_sweep.measure (greedy, batched) and appends to
results/sft_retention_sweep.json under the configuration `kl-anchor,...`.

Run (one at a time, several minutes on a 2-core CPU):
    .venv/bin/python benchmarks/sft_kl_anchor.py coef=1.0 anchor=8 facts=2 learning_rate=2e-3
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import sft_retention_sweep

from cookbook_engine import config as cfg, renderers
from cookbook_engine.backends import compat
from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.distill.sampling import sample_group
from cookbook_engine.rl import kl
from cookbook_engine.rl.data import datum_from_rollout, for_training
from cookbook_engine.sl.data import prepare
from cookbook_engine.sl.loop import weighted_nll
from cookbook_engine.training import reference
from cookbook_engine.training.common import adam_params, lr_multiplier, start_training_client, tokenizer_for
from cookbook_engine.training.plan import batch_at


async def train(settings: dict[str, str], home: Path) -> tuple[Path, float, list[dict]]:
    coef = float(settings.get("coef", "1.0"))
    anchor = int(settings.get("anchor", "8"))
    copies = int(settings.get("facts", "2"))
    replay = int(settings.get("replay", "0"))  # replay rows (base greedy replies) kept beside the anchor, as SL rows
    rows = builtin_data.fact_rows_only() * copies + builtin_data.replay_rows()[:replay]
    data = home / "facts.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = cfg.SLConfig(
        dataset=str(data),
        batch_size=8,
        num_epochs=1,
        learning_rate=float(settings.get("learning_rate", "2e-3")),
        lr_schedule=settings.get("lr_schedule", "linear"),
        test_fraction=0.0,
    )
    prepared = prepare(config)
    distill = cfg.DistillConfig(
        teacher="base", group_size=1, max_tokens=int(settings.get("max_tokens", "48")), temperature=1.0
    )
    service, client, _ = start_training_client(config, None)
    base = reference.sampling_client_for(service, config.model, reference.BASE)
    renderer = renderers.get_renderer("auto", tokenizer_for(config))
    prompts = [row["messages"][:-1] for row in builtin_data.replay_rows()]
    steps = max(1, len(prepared.train) // config.batch_size)
    log = []
    started = time.perf_counter()
    for step in range(steps):
        lr = config.learning_rate * lr_multiplier(config.lr_schedule, step, steps)
        batch = batch_at(prepared.train, config, step, steps)
        metrics = {"step": step}
        if anchor and coef > 0:
            sampler = await client.save_weights_and_get_sampling_client_async()
            chosen = [prompts[(step * anchor + i) % len(prompts)] for i in range(anchor)]
            groups = await asyncio.gather(
                *[sample_group(p, renderer, sampler, distill, 1000 * step + i) for i, p in enumerate(chosen)]
            )
            data_D = [datum_from_rollout(r, 0.0) for g in groups for r in g.rollouts_G]
            metrics.update(await kl.add_teacher_advantages(data_D, base, coef))
            await (await client.forward_backward_async([for_training(d) for d in data_D], "importance_sampling"))
        fb = await (await client.forward_backward_async(batch, "cross_entropy"))
        await (await client.optim_step_async(adam_params(config, lr)))
        nll, weights = weighted_nll(batch, fb)
        metrics["train_nll"] = nll / max(weights, 1e-9)
        log.append(metrics)
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step}/{steps} {metrics}", flush=True)
    minutes = (time.perf_counter() - started) / 60
    saved = await (await client.save_weights_for_sampler_async("final"))
    return compat.resolve(saved.path), minutes, log


def main() -> None:
    sft_retention_sweep.run_experiments("kl-anchor", lambda settings, home: asyncio.run(train(settings, home)))


if __name__ == "__main__":
    main()
