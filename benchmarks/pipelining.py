"""Clock cycles per training step on the clocked simulator (Tinker-style worker-pool clock), pipelined vs not.

    .venv/bin/python benchmarks/pipelining.py [--period 0.5] [--steps 6] [--out results.md]

SL, three loops over the same tiny batches (2 short chats of ~20 tokens, max_length 64):
- "pipelined": the studio's own SL loop (cookbook_engine.sl.loop.train, started by the RunManager): forward_backward
  and optim_step submitted back to back, the next batch queued before the previous results are awaited;
- "await each step": forward_backward and optim_step back to back, then both awaited before the next step (the
  tinker docs' "non-pipelined" loop);
- "await each request": forward_backward awaited before optim_step is sent, optim_step awaited before the next step.
RL: the studio's RL loop on a tiny arithmetic run (2 groups x 4 samples of 8 tokens, rewards fixed to 0, 1, 0, 1
in each group so that every step trains): synchronous; synchronous and
streaming (`stream_minibatch=true`) with 2 optimizer substeps and a sampler that takes one request per tick
(`clock_samples_per_tick=1`, so a step's groups come back in two waves, which streaming overlaps with training);
off-policy with `max_steps_off_policy=1` (sampling keeps running while the trainer trains).

SL cycles per step = mean distance, in clock ticks, between consecutive optim_step answers (backends/clocked.py).
RL cycles per step = mean distance, in ticks, between the admissions of consecutive new sampling clients (one per
step that trained; a step whose groups all got equal rewards trains nothing and is noted).
The table is printed and written to benchmarks/results/pipelining.json (common.write_result).
The period (default 0.5 s) must exceed each loop's own work between an answer and its next request: at 0.25 s the
RL loop's work between steps (transcripts and metrics to DuckDB, ~0.3-1 s on this loaded 2-core CPU) sometimes
outlasted a period and showed as extra cycles (6.8 per step instead of 6). The run happens in a throw-away studio
home; the converted default model is reused from the usual model cache.
Not here: wall-clock speed of the local backend (the cycle counts are independent of it by construction).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHORT_CHATS = [
    ("Hi", "Hello."),
    ("Bye", "Goodbye."),
    ("Thanks", "You're welcome."),
    ("Yes?", "Yes."),
    ("Ping", "Pong."),
    ("Up?", "Down."),
    ("Red?", "Blue."),
    ("One?", "Two."),
    ("Cat?", "Dog."),
    ("Sun?", "Moon."),
    ("Hot?", "Cold."),
    ("Tea?", "Coffee."),
]


def use_scratch_home() -> str:
    """Point the studio at a temporary home, keeping the model cache of the current one."""
    from cookbook_engine import paths

    os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(paths.models_dir()))
    home = tempfile.mkdtemp(prefix="cookbook-bench-")
    os.environ["COOKBOOK_HOME"] = home
    return home


def write_dataset(folder: str) -> str:
    path = Path(folder) / "short_chats.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n"
            for q, a in SHORT_CHATS
        )
    )
    return str(path)


def sl_config(dataset: str, period_s: float, steps: int):
    from cookbook_engine.config import ClockedConfig, SLConfig

    return SLConfig(
        dataset=dataset,
        backend="clocked",
        clocked=ClockedConfig(period_s),
        batch_size=2,
        max_length=64,
        max_steps=steps,
        learning_rate=1e-4,
        lora_rank=4,
        test_fraction=0.0,
        eval_every=0,
        save_every=0,
    )


def run_with_manager(config):
    """A run of the studio's own loop through the RunManager; returns the clock's counts."""
    from cookbook_engine.backends import clocked
    from cookbook_engine.runs import RunManager

    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id)
    if run["status"] != "completed":
        raise RuntimeError(f"run {run_id} {run['status']}: {run.get('error')}")
    return clocked.latest_stats()


def figures(stats) -> dict:
    return {
        "cycles_per_step": stats.cycles_per_step(),
        "steps": len(stats.optim_step_ticks),
        "work_cycles": stats.cycles,
    }


def rl_figures(stats, steps: int) -> dict:
    """Ticks between consecutive new sampling clients (the first is taken before step 0), per RL step."""
    ticks = [tick for tick, methods in stats.cycle_log if "save_weights_and_get_sampling_client" in methods]
    trained = len(ticks) - 1
    return {
        "cycles_per_step": (ticks[-1] - ticks[0]) / trained if trained else None,
        "steps": steps,
        "work_cycles": stats.cycles,
        "note": f"{steps - trained} of {steps} steps without training" if trained < steps else "",
    }


def run_manual_loop(config, await_each_request: bool) -> dict:
    """An unpipelined SL loop over the same batches as the studio's loop, on the clocked backend."""
    from cookbook_engine.backends import service_client
    from cookbook_engine.sl.loop import batch_at, plan_steps, prepare
    from cookbook_engine.training.common import adam_params
    from cookbook_engine.training.lora_a import rank_used

    prepared = prepare(config)
    batches_per_epoch, total = plan_steps(config, len(prepared.train))
    service = service_client("clocked", clocked=config.clocked)
    client = service.create_lora_training_client(config.model, rank=rank_used(config), seed=config.seed).result()

    async def loop():
        for step in range(total):
            batch = batch_at(prepared.train, config, step, batches_per_epoch)
            forward_backward = await client.forward_backward_async(batch, "cross_entropy")
            if await_each_request:
                await forward_backward
            optim = await client.optim_step_async(adam_params(config, config.learning_rate))
            await forward_backward
            await optim

    with service:
        asyncio.run(loop())
    return service.stats


def fix_rl_rewards() -> None:
    """Rewards 0, 1, 0, 1, ... in every group (rl/envs.py's with_fixed_mixed_rewards): every step trains, so the
    cycle counts do not depend on what the model samples."""
    from cookbook_engine.rl import envs

    build_env = envs.build_env
    envs.build_env = lambda config, renderer: envs.with_fixed_mixed_rewards(build_env(config, renderer))


def rl_variants(period_s: float, steps: int) -> list:
    from cookbook_engine.config import ClockedConfig, PipeliningConfig, RLConfig

    base = dict(
        env="arithmetic",
        backend="clocked",
        group_size=4,
        groups_per_batch=2,
        max_tokens=8,
        max_steps=steps,
        eval_every=0,
        num_eval_problems=0,
        save_every=0,
        lora_rank=4,
        learning_rate=1e-4,
        temperature=1.0,
    )
    ticks, waves = ClockedConfig(period_s), dict(clocked=ClockedConfig(period_s, samples_per_tick=1), num_substeps=2)
    return [
        ("RL synchronous", RLConfig(**base, clocked=ticks)),
        ("RL synchronous, 2 substeps, 1 sample/tick", RLConfig(**base, **waves)),
        (
            "RL stream_minibatch=true, 2 substeps, 1 sample/tick",
            RLConfig(**base, **waves, pipelining=PipeliningConfig(stream_minibatch=True)),
        ),
        (
            "RL max_steps_off_policy=1",
            RLConfig(**base, clocked=ticks, pipelining=PipeliningConfig(max_steps_off_policy=1), loss_fn="ppo"),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--period", type=float, default=0.5, help="clock period in seconds (default 0.5)")
    parser.add_argument("--steps", type=int, default=6, help="training steps per loop (default 6)")
    parser.add_argument("--out", help="also write the markdown table to this file")
    options = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    home = use_scratch_home()
    try:
        rows = measure(options, write_dataset(home))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    table = markdown_table(options, rows)
    print(table)
    if options.out:
        Path(options.out).write_text(table + "\n")
    import common  # benchmarks/common.py (this script's folder is on sys.path)

    common.write_result(
        "pipelining",
        {
            "period_s": options.period,
            "steps": options.steps,
            "rows": [
                {"loop": name, **(result if isinstance(result, dict) else {"error": result})} for name, result in rows
            ],
        },
    )
    return 0


def measure(options: argparse.Namespace, dataset: str) -> list[tuple[str, dict | str]]:
    rows: list[tuple[str, dict | str]] = []
    config = sl_config(dataset, options.period, options.steps)
    rows.append(("SL pipelined (studio loop)", figures(run_with_manager(config))))
    rows.append(("SL await each step", figures(run_manual_loop(config, await_each_request=False))))
    rows.append(("SL await each request", figures(run_manual_loop(config, await_each_request=True))))
    fix_rl_rewards()
    for name, rl_config in rl_variants(options.period, options.steps):
        try:
            rows.append((name, rl_figures(run_with_manager(rl_config), options.steps)))
        except Exception as exc:  # a variant that fails is a row saying so, not a crash of the whole benchmark
            rows.append((name, f"not measured: {type(exc).__name__}: {exc}"))
    return rows


def markdown_table(options: argparse.Namespace, rows: list[tuple[str, dict | str]]) -> str:
    lines = [
        f"Clocked simulator, period {options.period:g} s, {options.steps} steps per loop, batch 2 x ~20 tokens.",
        "",
        "| loop | cycles / step | steps | cycles with work | note |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name, result in rows:
        if isinstance(result, str):
            lines.append(f"| {name} | | | | {result} |")
        else:
            per_step = result["cycles_per_step"]
            shown = f"{per_step:.2f}" if per_step is not None else "n/a"
            lines.append(
                f"| {name} | {shown} | {result['steps']} | {result['work_cycles']} | {result.get('note', '')} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
