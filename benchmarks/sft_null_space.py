"""An experiment for issue 23: LoRA whose input side reads only directions that ordinary text does not use, so the
update leaves the model's answers to ordinary questions alone by construction rather than by what the replay data
happens to cover (the idea of AlphaEdit, Fang et al. 2025, and LoRA-Null, 2025: project the update onto the null
space of preserved-knowledge activations).

For each LoRA-targeted projection W (d_out x d_in): C_keep = the base model's inputs to W on ordinary chats (the
replay rows and the facts' wordings asked about real countries, "neighbour" rows), C_task = its inputs on the facts
rows. LoRA's A (r x d_in) is fixed to the r generalised eigenvectors of (C_task, C_keep + lambda I) with the largest
ratio: the input directions where the facts differ most from ordinary text. Only B trains, so the update B A x is
small wherever x looks like ordinary text. Control: the same loop with A trained from peft's init
(benchmarks/sft_soft_replay.py replay=hard is the demo in this loop).

Settings (key=value, comma-separated): rank (32), ridge (1e-3), keep (replay+neighbours or replay), facts (copies of
the facts rows, 2), replay (replay rows trained on as well, 0), learning_rate (2e-3), seed (0, the data order).
Measured in benchmarks/README.md. Run (one at a time; 6-11 minutes each on a 2-core CPU):
    .venv/bin/python benchmarks/sft_null_space.py rank=8,keep=replay+neighbours,facts=3
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import sft_retention_sweep
from peft import LoraConfig, get_peft_model
from sft_soft_replay import MODULES, load_default, rendered, train_loop

from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.training.null_space import input_covariances, reading_directions


def train(settings: dict[str, str], home: Path) -> tuple[Path, float, list[dict]]:
    rank = int(settings.get("rank", "32"))
    ridge = float(settings.get("ridge", "1e-3"))
    lr0 = float(settings.get("learning_rate", "2e-3"))
    model, renderer, pad = load_default()
    fact_examples = rendered(builtin_data.fact_rows_only(), renderer)
    keep_rows = builtin_data.replay_rows()  # keep=replay: these alone; keep=replay+neighbours (the default) adds
    if settings.get("keep", "replay+neighbours") == "replay+neighbours":  # the facts' wordings about real subjects
        keep_rows += builtin_data.neighbour_rows()
    keep_examples = rendered(keep_rows, renderer)
    started = time.perf_counter()
    keep = input_covariances(model, [t for t, _ in keep_examples], pad, tuple(MODULES))
    task = input_covariances(model, [t for t, _ in fact_examples], pad, tuple(MODULES))
    directions = {name: reading_directions(keep[name], task[name], rank, ridge) for name in keep}
    print(f"directions in {time.perf_counter() - started:.0f}s", flush=True)
    rows = [(t, w) for t, w in fact_examples * int(settings.get("facts", "2"))]
    rows += rendered(builtin_data.replay_rows()[: int(settings.get("replay", "0"))], renderer)
    random.Random(int(settings.get("seed", "0"))).shuffle(rows)  # A is fixed and B starts at 0: the seed is the order
    model = get_peft_model(
        model, LoraConfig(r=rank, lora_alpha=rank, target_modules=MODULES, lora_dropout=0.0, bias="none")
    )
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            base_name = name.removeprefix("base_model.model.")
            module.lora_A["default"].weight.data.copy_(directions[base_name])
            module.lora_A["default"].weight.requires_grad_(False)
    log = train_loop(model, [(t, w, None) for t, w in rows], pad, lr0, 1.0, started)  # B alone requires a gradient
    minutes = (time.perf_counter() - started) / 60
    folder = home / "adapter"
    model.save_pretrained(folder)
    return folder, minutes, log


def main() -> None:
    sft_retention_sweep.run_experiments("null-space", train)


if __name__ == "__main__":
    main()
