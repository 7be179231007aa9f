"""An experiment for issue 23 (item 1, SFT's and DPO's retention): the SFT demo and the DPO default with LoRA's
input side A fixed away from ordinary chats (`lora_a=null_space`, training/null_space.py and training/lora_a.py), as
RL's default does, through the engine's own loops and local backend, then `cookbook eval models=base,RUN` with the
retention answers lost and gained.

- kind=sl: `cookbook sl dataset=builtin:facts` (the Quorvania facts three times since 2026-11-29; before, the facts
  twice with 292 replay rows), batch 8, one epoch, lr 5e-4; evaluated on `facts-probes` and `retention`.
- kind=dpo: `cookbook dpo dataset=builtin:concise-prefs` with the DPO default's settings; evaluated on the default's
  own kinds, the kinds never trained and `retention`.

Settings (key=value, comma-separated; one run per call): kind (sl | dpo), lora_a (null_space | trained | auto), rank
(sl 8, dpo 32), seed (0), copies (sl: the facts this many times; FACTS_COPIES unless set), data (dpo: hard adds the
312 contrast pairs of three draws of dpo_contrast_data's that the base model prefers least; sl: neighbours adds the
189 neighbour rows, builtin.neighbour_rows), task (dpo: differences fixes A where the pairs' chosen and rejected
replies differ most against ordinary chats, reply_difference_covariances, cached in a folder of its own),
keep_decay (the task's B decay where ordinary chats read A, training/lora_a.py KEEP_DECAY; the engine's own value
unless set), evals (the sets to ask, joined by +, e.g. evals=prefs-style-controlled+retention; the kind's sets unless
set), base (skip: the base model is not asked again and the retention answers lost are the trained model's wrong ones;
only where the base answers all of builtin:retention, as in fp32 on the default model), and any loop setting as
set.KEY=VALUE (e.g. set.learning_rate=3e-4, set.train_attn=false).
The engine's LoRA alpha is 32 whatever the rank, so rank 8 scales B A by 4. Appends to results/null_space_loops.json
(the runs before 2026-11-29 10:00 fixed A by wrapping the loop's client start, with the same directions, before SL and
DPO had the setting). Run alone (6-15 minutes each on a 2-core CPU, plus about 3 minutes once per model for the
ordinary chats' covariances):
    ../.venv/bin/python null_space_loops.py kind=sl
    ../.venv/bin/python null_space_loops.py kind=dpo,seed=1
"""

from __future__ import annotations

import os
import time

import common

RESULTS = common.RESULTS / "null_space_loops.json"
EVALS = {
    "sl": ("builtin:facts-probes", "builtin:retention"),
    "dpo": ("builtin:prefs-style-controlled", "builtin:prefs-unseen-kinds", "builtin:retention"),
}
DATASET = {"sl": "builtin:facts", "dpo": "builtin:concise-prefs"}


def accuracy_of(store, eval_id: str, eval_set: str) -> dict[str, float]:
    examples = store.examples(eval_id, eval_set)
    is_base = examples["model"] == "base"
    return {
        side: round(float(rows["correct"].astype(float).mean()), 3) if len(rows) else None  # base=skip: no base rows
        for side, rows in (("base", examples[is_base]), ("trained", examples[~is_base]))
    }


def by_reference(store, eval_id: str, eval_set: str) -> dict[str, str]:
    """The trained model's right answers per reference (for the facts: per fact, "8/10")."""
    examples = store.examples(eval_id, eval_set)
    trained = examples[examples["model"] != "base"]
    counts = trained.groupby("reference")["correct"].agg(["sum", "count"])
    return {str(ref): f"{int(row['sum'])}/{int(row['count'])}" for ref, row in counts.iterrows()}


def add_pairs(builtin_data, extra: list) -> None:
    """builtin:concise-prefs becomes its own pairs and `extra`, shuffled, for this process: its training rows and
    lora_a=null_space's task chats both read concise_prefs_pairs."""
    import random

    default_pairs = builtin_data.concise_prefs_pairs

    def with_extra():
        pairs = default_pairs() + extra
        random.Random(1).shuffle(pairs)
        return pairs

    builtin_data.concise_prefs_pairs = with_extra


def add_neighbours(builtin_data) -> None:
    """builtin:facts becomes its rows and the neighbour rows (the facts' own wordings about real countries, answered
    by the base model itself), shuffled, for this process. lora_a=null_space's task chats stay the facts alone
    (lora_a._facts_chats reads fact_rows_only), so A is the default's and only what B trains on changes."""
    import dataclasses
    import random

    facts = builtin_data.BUILTIN["facts"]

    def with_neighbours():
        rows = facts.make_rows() + builtin_data.neighbour_rows()
        random.Random(1).shuffle(rows)
        return rows

    builtin_data.BUILTIN["facts"] = dataclasses.replace(facts, make_rows=with_neighbours)


def reply_difference_covariances(model, token_lists, pad, modules):
    """Per projection in `modules`: the mean over pairs of d d^T, d = the chosen reply's mean input minus the rejected
    reply's, each over the positions from the first token where the two differ (the shared prompt reads the same).
    `token_lists` alternate chosen, rejected (builtin.concise_prefs_chats)."""
    import torch

    from cookbook_engine.training.null_space import padded_inputs, reading_inputs

    means: dict[str, list] = {}
    span: list = []

    def add(name, x):
        (c0, c1), (r0, r1) = span
        x = x.float()
        means.setdefault(name, []).append(x[0, c0:c1].mean(0) - x[1, r0:r1].mean(0))

    with reading_inputs(model, modules, add) as (reader_of, new_pass), torch.no_grad():
        for chosen, rejected in zip(token_lists[0::2], token_lists[1::2], strict=True):
            first = next(i for i, (a, b) in enumerate(zip(chosen, rejected)) if a != b)
            ends = (len(chosen) - 1, len(rejected) - 1)  # as training sees them: the last token is only a target
            if first >= min(ends):
                continue
            ids_B_T, mask_B_T = padded_inputs([chosen, rejected], pad)
            span[:] = [(first, ends[0]), (first, ends[1])]
            new_pass()
            model.model(input_ids=ids_B_T, attention_mask=mask_B_T)
    covariances = {}
    for name, rows in means.items():
        d = torch.stack(rows)
        covariances[name] = d.T @ d / len(rows)
    return {name: covariances[reader] for name, reader in reader_of.items()}


def use_reply_differences(builtin_data) -> None:
    """lora_a=null_space's task covariance for DPO becomes reply_difference_covariances of the pairs (the ordinary
    chats' stays), for this process. The cache is keyed by the pairs' tokens, not by how their covariance was
    computed, so this process keeps its task and direction files in a folder of their own (the default's are
    neither read nor overwritten) and links the ordinary chats' file from the default's folder when it is there."""
    from cookbook_engine import models
    from cookbook_engine.training import null_space

    chats = builtin_data.concise_prefs_chats()
    task_tokens = null_space._tokens(models.DEFAULT_MODEL, chats)
    (shared_keep, _), _ = null_space._inputs(models.DEFAULT_MODEL, chats, ("q_proj",))
    null_space.CACHE_FOLDER = f"{null_space.CACHE_FOLDER}-reply-differences"
    (own_keep, _), _ = null_space._inputs(models.DEFAULT_MODEL, chats, ("q_proj",))
    if shared_keep.exists() and not own_keep.exists():
        own_keep.parent.mkdir(parents=True, exist_ok=True)
        own_keep.symlink_to(shared_keep)
    plain = null_space.input_covariances

    def covariances(model, token_lists, pad, modules):
        if token_lists == task_tokens:
            return reply_difference_covariances(model, token_lists, pad, modules)
        return plain(model, token_lists, pad, modules)

    null_space.input_covariances = covariances


def base_margins(pairs) -> list[float]:
    """The base model's summed log-probability of each pair's chosen reply minus its rejected one's (fp32)."""
    from prefs_prior import reply_scorer

    logprob = reply_scorer()
    return [logprob(p.prompt, p.chosen) - logprob(p.prompt, p.rejected) for p in pairs]


def hard_contrast_pairs(limit: int = 312) -> list:
    """The `limit` contrast pairs (three draws of dpo_contrast_data's, 12 twins a kind each) the base model prefers
    least, its own mistakes first."""
    from dpo_contrast_data import contrast_pairs

    pool = list({p.prompt: p for seed in (0, 1, 2) for p in contrast_pairs(seed=seed)}.values())
    margins = base_margins(pool)
    print(f"hard pairs: {len(pool)} contrast pairs, base wrong on {sum(m < 0 for m in margins)}; {limit} taken")
    return [p for _, p in sorted(zip(margins, pool, strict=True), key=lambda item: item[0])][:limit]


def run(settings: dict[str, str], home) -> dict:
    from cookbook_engine import cli
    from cookbook_engine.data import builtin as builtin_data
    from cookbook_engine.training import lora_a
    from storage import Store
    from storage.evals import EvalStore

    kind = settings.get("kind", "sl")
    if "copies" in settings:  # the SFT demo's facts this many times (data/builtin.py FACTS_COPIES)
        builtin_data.FACTS_COPIES = int(settings["copies"])
    if settings.get("data") == "hard":  # DPO: the default's pairs and the contrast pairs the base model prefers least
        add_pairs(builtin_data, hard_contrast_pairs())
    if settings.get("data") == "neighbours":  # SL: the facts and the base's own replies to their real-world twins
        add_neighbours(builtin_data)
    if settings.get("task") == "differences":  # DPO: A reads where right and wrong replies differ, not the pairs
        use_reply_differences(builtin_data)
    if "keep_decay" in settings:
        lora_a.KEEP_DECAY[(kind, DATASET[kind])] = float(settings["keep_decay"])
    rank = int(settings.get("rank", "8" if kind == "sl" else "32"))
    name = f"{kind}-{time.strftime('%H%M%S')}"
    command = [kind, f"dataset={DATASET[kind]}", f"seed={settings.get('seed', '0')}", f"lora_rank={rank}"]
    command += [f"lora_a={settings.get('lora_a', 'null_space')}"]
    command += [f"{k[4:]}={v}" for k, v in settings.items() if k.startswith("set.")]
    if kind == "sl":
        rate = [] if "set.learning_rate" in settings else ["learning_rate=5e-4"]
        command += ["num_epochs=1", "batch_size=8", *rate]
    load_start = list(os.getloadavg())
    started = time.perf_counter()
    assert cli.main([*command, f"name={name}"]) == 0
    minutes = (time.perf_counter() - started) / 60
    run_id = next(r["run_id"] for r in Store.default().list_runs() if r["name"] == name)
    evals = EVALS[kind]
    if "evals" in settings:
        evals = tuple(f"builtin:{set_name}" for set_name in settings["evals"].split("+"))
        assert evals[-1] == "builtin:retention", "evals=...: retention comes last"
    skip_base = settings.get("base") == "skip"
    models = run_id if skip_base else f"base,{run_id}"
    assert cli.main(["eval", f"models={models}", "evals=" + ",".join(evals), "--json"]) == 0
    store = EvalStore()
    eval_id = store.list_jobs()[0]["eval_id"]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": common.machine(),
        "load_start": load_start,
        "settings": settings,
        "command": command,
        "train_minutes": round(minutes, 2),  # model load, directions (cached after the first run) and training
        "facts_copies": builtin_data.FACTS_COPIES if kind == "sl" else None,
        "keep_decay": lora_a.KEEP_DECAY.get((kind, DATASET[kind]), 0.0),
        "accuracy": {eval_set: accuracy_of(store, eval_id, eval_set) for eval_set in evals[:-1]},
        "by_reference": {eval_set: by_reference(store, eval_id, eval_set) for eval_set in evals[:-1]},
        "retention": common.retention_of_eval(store, eval_id, skip_base),  # lost, gained, the wrong replies
    }


def main() -> None:
    common.run_once_and_append("null-space-loops-", RESULTS, run)


if __name__ == "__main__":
    main()
