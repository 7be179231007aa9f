"""An experiment for issue 23 (SFT's retention with LoRA's A fixed, `lora_a=null_space`): how much do ordinary inputs
still read the SFT demo's fixed directions, and is that a matter of too few ordinary chats?

For rank-8 directions solved from the facts' chats against (a) half of the keep chats (replay + neighbour rows,
shuffled with seed 0) and (b) all of them, it prints for a sample of projections (layers 0, 6, 12, 18, 24; q, o, gate,
down) each chat set's energy in the directions, mean_i a_i^T C a_i, as a share of the facts' own: k1 (the half the
directions were solved from), k2 (the other half), ret (the `builtin:retention` questions with the base model's
replies, which no run trains on) and task (1.0). If held-out ordinary inputs (k2, ret) read the directions far more
than the chats they were solved from, more keep chats would help; if about as much, the leak is in-distribution and
the directions cannot remove it. Prints only; about 7 minutes on a 2-core CPU, alone:
    COOKBOOK_MODEL_CACHE=... ../.venv/bin/python null_space_leak.py
"""

from __future__ import annotations

import random

import torch

from cookbook_engine import models
from cookbook_engine.backends.local import ATTN_MODULES, MLP_MODULES
from cookbook_engine.data import builtin
from cookbook_engine.training import null_space

MODULES = (*ATTN_MODULES, *MLP_MODULES)
SHOWN = ("q_proj", "gate_proj", "o_proj", "down_proj")


def main() -> None:
    name = models.DEFAULT_MODEL
    tokenizer = models.load_tokenizer(name)
    pad = tokenizer.pad_token_id or 0
    model = models.load_model(name)
    keep = null_space.keep_chats()
    random.Random(0).shuffle(keep)
    half_1, half_2 = keep[: len(keep) // 2], keep[len(keep) // 2 :]
    retention = [
        {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["base_reply"]}]}
        for r in builtin.retention_items()
    ]
    chat_sets = {"k1": half_1, "k2": half_2, "ret": retention, "task": builtin.fact_rows_only(), "all": keep}
    covariances = {
        key: null_space.input_covariances(model, null_space._tokens(name, chats), pad, MODULES)
        for key, chats in chat_sets.items()
    }
    for source in ("k1", "all"):
        print("directions from", source)
        for projection in covariances["task"]:
            layer, last = int(projection.split(".")[2]), projection.split(".")[-1]
            if last not in SHOWN or layer % 6:
                continue
            directions = null_space.reading_directions(
                covariances[source][projection], covariances["task"][projection], 8
            )
            energy = {
                key: float(torch.einsum("rd,de,re->", directions, covariances[key][projection], directions)) / 8
                for key in ("k1", "k2", "ret", "task")
            }
            print(f"  {projection:40s} " + " ".join(f"{k}={v / energy['task']:.4f}" for k, v in energy.items()))


if __name__ == "__main__":
    main()
