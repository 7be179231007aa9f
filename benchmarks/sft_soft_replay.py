"""An experiment for issue 23: the SFT demo's replay rows trained on the base model's own next-token distribution
(its top-K probabilities at each reply position, Tinker's "top-K distillation" form of cross_entropy) instead of on
the base model's greedy reply tokens. A hard-target replay row pulls the model toward its own greedy tokens and so
sharpens it (those rows alone lost 5.3 points of retention: docs/DEFAULTS.md); a soft-target row's gradient is zero
while the model still is the base model, and grows only where the facts pull it away: forward KL to the base model
on ordinary text (Learning without Forgetting, Li and Hoiem 2016).

This is a plain torch + peft loop that copies the demo's settings (LoRA rank 32, alpha 32 on every attention and MLP
projection, Adam 0.9/0.95, lr 2e-3 decaying linearly, batches of 8, the facts rows twice with the 292 replay rows,
shuffled with seed 0), so the control (`replay=hard`) and the experiment differ in the replay rows' targets alone.
Measures facts-probes and builtin:retention with sft_retention_sweep.measure and appends to
results/sft_retention_sweep.json under `soft-replay,...`.

Run (one at a time; several minutes on a 2-core CPU):
    .venv/bin/python benchmarks/sft_soft_replay.py replay=hard replay=soft,k=32
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import sft_retention_sweep
import torch
from peft import LoraConfig, get_peft_model

from cookbook_engine import models, renderers
from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.training.common import lr_multiplier

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def rendered(rows: list[dict], renderer) -> list[tuple[list[int], list[float]]]:
    out = []
    for row in rows:
        tokens, weights = renderer.build_supervised_example(row["messages"], "last_assistant_message")
        out.append(
            (list(tokens.to_ints()) if hasattr(tokens, "to_ints") else list(tokens), [float(w) for w in weights])
        )
    return out


def padded(batch: list[tuple[list[int], list[float]]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(t) for t, _ in batch) - 1
    ids_B_T = torch.full((len(batch), width), pad, dtype=torch.long)
    mask_B_T = torch.zeros(len(batch), width, dtype=torch.long)
    for b, (tokens, _) in enumerate(batch):
        ids_B_T[b, : len(tokens) - 1] = torch.tensor(tokens[:-1])
        mask_B_T[b, : len(tokens) - 1] = 1
    return ids_B_T, mask_B_T


@torch.no_grad()
def base_topk(model, examples, k: int, pad: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """For each example: (positions with a loss weight, the base model's top-k token ids there, their probs)."""
    out = []
    for start in range(0, len(examples), 8):
        chunk = examples[start : start + 8]
        ids_B_T, mask_B_T = padded(chunk, pad)
        logp_B_T_V = torch.log_softmax(model(input_ids=ids_B_T, attention_mask=mask_B_T).logits.float(), -1)
        for b, (_, weights) in enumerate(chunk):
            positions = torch.tensor([i for i, w in enumerate(weights[1:]) if w > 0])
            values, ids = logp_B_T_V[b, positions].topk(k, dim=-1)
            out.append((positions, ids, values.exp()))
    return out


def load_default():
    """(model, renderer, pad token id) of the default model in fp32, as these experiments train it."""
    model = models.load_model(models.DEFAULT_MODEL)
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return model, renderers.get_renderer("auto", tokenizer), pad


def train_loop(model, rows, pad: int, lr0: float, coef: float, started: float) -> list[dict]:
    """Adam over batches of 8 of `rows` (tokens, weights, soft target or None: the row's own tokens), lr decaying
    linearly from lr0; the trainable parameters are whatever of the model requires a gradient. The step log."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr0, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)
    steps = len(rows) // 8
    log = []
    model.train()
    for step in range(steps):
        batch = rows[step * 8 : step * 8 + 8]
        ids_B_T, mask_B_T = padded([(t, w) for t, w, _ in batch], pad)
        logp_B_T_V = torch.log_softmax(model(input_ids=ids_B_T, attention_mask=mask_B_T).logits.float(), -1)
        loss, hard_nll, soft_ce = torch.zeros(()), 0.0, 0.0
        for b, (tokens, weights, target) in enumerate(batch):
            if target is None:  # hard targets: the row's own next tokens
                n = len(tokens) - 1
                w_T = torch.tensor(weights[1:])
                lp_T = logp_B_T_V[b, :n].gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]
                term = -(w_T * lp_T).sum()
                hard_nll += float(term)
            else:  # the base model's top-k distribution at each reply position
                positions, ids_P_K, probs_P_K = target
                term = -coef * (probs_P_K * logp_B_T_V[b, positions].gather(-1, ids_P_K)).sum()
                soft_ce += float(term)
            loss = loss + term
        for group in optimizer.param_groups:
            group["lr"] = lr0 * lr_multiplier("linear", step, steps)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        log.append({"step": step, "hard_nll_sum": hard_nll, "soft_ce_sum": soft_ce})
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step}/{steps} {log[-1]} {time.perf_counter() - started:.0f}s", flush=True)
    return log


def train(settings: dict[str, str], home: Path) -> tuple[Path, float, list[dict]]:
    torch.manual_seed(0)
    mode = settings.get("replay", "soft")
    k = int(settings.get("k", "32"))
    coef = float(settings.get("coef", "1.0"))
    lr0 = float(settings.get("learning_rate", "2e-3"))
    model, renderer, pad = load_default()
    facts = [
        (t, w, None) for t, w in rendered(builtin_data.fact_rows_only() * int(settings.get("facts", "2")), renderer)
    ]
    replay_examples = rendered(builtin_data.replay_rows()[: int(settings.get("rows", "292"))], renderer)
    replay_examples += rendered(builtin_data.neighbour_rows()[: int(settings.get("neighbours", "0"))], renderer)
    replay_examples *= int(settings.get("anchor_copies", "1"))
    soft = base_topk(model, replay_examples, k, pad) if mode == "soft" else [None] * len(replay_examples)
    replay = [(t, w, s) for (t, w), s in zip(replay_examples, soft)]
    rows = facts + replay
    random.Random(0).shuffle(rows)
    model = get_peft_model(
        model,
        LoraConfig(
            r=32,
            lora_alpha=32,
            target_modules=MODULES[4:] if settings.get("modules") == "mlp" else MODULES,
            lora_dropout=0.0,
            bias="none",
        ),
    )
    started = time.perf_counter()
    log = train_loop(model, rows, pad, lr0, coef, started)
    minutes = (time.perf_counter() - started) / 60
    folder = home / "adapter"
    model.save_pretrained(folder)
    return folder, minutes, log


def main() -> None:
    sft_retention_sweep.run_experiments("soft-replay", train)


if __name__ == "__main__":
    main()
