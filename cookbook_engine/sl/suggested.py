"""Suggested SL and DPO settings for the built-in datasets: the values measured to teach the default model on this
project's 2-core CPU within minutes, what the measurement showed, and the warnings for settings far from them.

One home for these numbers (RL's are in rl/suggested.py): learning_rate=auto trains with the measured rate
(training/learning_rate.py decides it for every loop), so `cookbook sl dataset=builtin:facts` and
`cookbook dpo dataset=builtin:concise-prefs` use them; the New run form shows `reason()` beside the rate and
`far_from_suggested()` after a check. Other models and datasets were not measured: they keep the model's suggested
rate (DPO a share of it) and the form says so. Not here: the loops, the form's widgets.
"""

from __future__ import annotations

from dataclasses import dataclass

from cookbook_engine import models
from cookbook_engine.data.builtin import BUILTIN


@dataclass(frozen=True)
class Measured:
    learning_rate: float
    batch_size: int
    num_epochs: int
    steps: int  # what batch_size and num_epochs give on the default split (a test keeps this true)
    result: str  # what the run did to its held-out eval set, and how long it took
    dpo_beta: float = 0.0  # DPO only
    rpo_alpha: float = 0.0  # DPO only
    lora_a: str = "trained"  # LoRA's A trained, or fixed away from ordinary chats ("null_space"; training/lora_a.py)
    lora_rank: int = 0  # the rank measured, where it matters (SL's null_space: fewer directions keep more); 0: any
    source: str = "docs/DEFAULTS.md"


MEASURED: dict[tuple[str, str], Measured] = {
    ("sl", "builtin:facts"): Measured(
        learning_rate=1e-3,
        batch_size=8,
        num_epochs=1,
        steps=103,
        lora_a="null_space",
        lora_rank=8,
        result="the facts four times, with LoRA's A fixed to the directions where they differ most from ordinary "
        "chats and B decayed where ordinary chats still read them (lora_a=null_space, rank 8, keep decay 2000; "
        "2026-12-02, a 2-core Intel Xeon with AMX, bf16): builtin:facts-probes (n=120, unseen wordings) 0.000 -> "
        "0.992 and 1.000 on two data orders, every fact 9 or 10 of 10, and of 322 ordinary questions the base "
        "answers right (builtin:retention) 4 lost and 3 gained, 3 lost and 2 gained, both within the interval of "
        "zero; at lr 7e-4 with the facts three times (the default until then) the founding year 6 of 10; with A "
        "trained and 292 replay rows mixed in, the probes 1.000 but about 30 lost, and without them 'What is the "
        "capital of France?' became Lunthaven",
    ),
    ("dpo", "builtin:concise-prefs"): Measured(
        learning_rate=5e-4,
        batch_size=8,
        num_epochs=1,
        steps=24,
        dpo_beta=0.1,
        rpo_alpha=1.0,
        lora_a="null_space",
        result="with LoRA's A fixed to the directions where the pairs differ most from ordinary chats "
        "(lora_a=null_space) and B decayed where ordinary chats still read them (keep decay 1500, 2026-12-02, a "
        "2-core AMD EPYC, fp32), strict held-out accuracy on pairs that differ only in correctness "
        "(builtin:prefs-style-controlled, n=195) 0.779 -> 0.928 [0.883, 0.957], and of 322 ordinary questions the "
        "base answers right, none of them in the training pairs (builtin:retention), 1 lost, within the interval "
        "of zero (without the decay 12 lost; on a 2-core Intel Xeon 0.928 and 0.933 on seeds 0 and 1, 8 and 7 lost); "
        "with A trained 0.913 but 36 lost, and plain DPO (rpo_alpha 0) fell to 0.70",
    ),
}


def builtin_spec(dataset: str) -> str:
    return f"builtin:{dataset}" if dataset in BUILTIN else dataset


def measured_for(config) -> Measured | None:
    """The measured settings for this config's kind and dataset, when it trains the local default model."""
    if config.backend != "local" or models.canonical_name(config.model) != models.DEFAULT_MODEL:
        return None
    return MEASURED.get((config.kind, builtin_spec(getattr(config, "dataset", ""))))


def rank_for(config, lora_a_used: str) -> int | None:
    """The LoRA rank measured for this SL config's data and model with the lora_a it resolves to (`lora_a_used`, from
    the caller: training/lora_a imports this module), or None where none was measured."""
    measured = measured_for(config) if config.kind == "sl" else None
    if measured is None or not measured.lora_rank or lora_a_used != measured.lora_a:
        return None
    return measured.lora_rank


def reason(measured: Measured, dataset: str) -> str:
    """Why the suggested rate is what it is, for the form."""
    beta = f", beta {measured.dpo_beta:g}" if measured.dpo_beta else ""
    beta += f", rpo_alpha {measured.rpo_alpha:g}" if measured.rpo_alpha else ""
    beta += f", LoRA rank {measured.lora_rank}" if measured.lora_rank else ""
    return (
        f"measured on {builtin_spec(dataset)} with the default model on a 2-core CPU: {measured.num_epochs} "
        f"epoch{'s' if measured.num_epochs != 1 else ''} ({measured.steps} steps of {measured.batch_size}{beta}) "
        f"gave {measured.result}; see {measured.source}"
    )


def rate_note(used: float | None, measured: float, factor: float = 3.0) -> str:
    """A warning when a learning rate is more than `factor` away from the measured one (empty when it is not)."""
    if not used or measured / factor <= used <= measured * factor:
        return ""
    return (
        f"learning rate {used:g} is more than {factor:g}× away from the measured {measured:g} (lower learns little "
        "in a short run; higher can forget what the model knew or stop learning)"
    )


def far_from_suggested(config, learning_rate_used: float | None, steps: int, lora_a_used: str) -> list[str]:
    """A line for each setting of an SL or DPO config far from the measured ones (none when nothing was measured).
    `lora_a_used`: what the run's lora_a resolves to (training/lora_a.py `lora_a_used`)."""
    measured = measured_for(config)
    if measured is None:
        return []
    notes = [note for note in [rate_note(learning_rate_used, measured.learning_rate)] if note]
    if steps * config.batch_size < measured.steps * measured.batch_size / 2:
        notes.append(
            f"{steps} steps of {config.batch_size} is under half the examples the measured run saw "
            f"({measured.steps} steps of {measured.batch_size}): expect a weaker result"
        )
    if measured.dpo_beta and not measured.dpo_beta / 3 <= config.dpo_beta <= measured.dpo_beta * 3:
        notes.append(f"DPO beta {config.dpo_beta:g} is more than 3× away from the measured {measured.dpo_beta:g}")
    if measured.lora_rank and config.lora_rank not in (None, measured.lora_rank) and lora_a_used == measured.lora_a:
        notes.append(
            f"LoRA rank {config.lora_rank} with lora_a={measured.lora_a}: measured at rank {measured.lora_rank} "
            "(a higher rank fixes more directions and keeps less of what the model knew)"
        )
    if measured.rpo_alpha and not config.rpo_alpha:
        notes.append(
            f"rpo_alpha 0 is plain DPO: measured, it kept 0.70 of 322 ordinary answers where rpo_alpha "
            f"{measured.rpo_alpha:g} kept 0.87"
        )
    return notes


# What overwrote general behaviour when measured (issue 23, on 34 ordinary questions a new user asked): the SFT demo's
# Quorvania rows alone, one pass at 2e-3, then answered most questions it knew with a Quorvania fact.
FORGETTING_EXAMPLE = (
    "the SFT demo's Quorvania rows without replay rows (1 pass, 25 steps of 8, rate 2e-3) answered \"What is the "
    'capital of France?" with "The capital of France is Lunthaven." and 6 of 34 ordinary questions right (25 '
    "before)"
)
SMALL_DATASET = 1000  # rows: below this, repeated passes at a high rate overwrite more than they add
OVERWRITE_EXPOSURE = 2e-3  # learning rate × passes over the data at or above which a small dataset is risky


def overwrite_note(
    config, learning_rate_used: float | None, steps: int, train_rows: int, lora_a_used: str = "trained"
) -> str:
    """A warning when an SL run is likely to overwrite what the model knew: a small dataset seen at a high rate
    (learning rate × passes at least OVERWRITE_EXPOSURE), with the measured example. builtin:facts is allowed up to
    its measured settings with LoRA's A fixed as measured (lora_a=null_space), and warned at any with A trained (its
    rows alone are what overwrote). `lora_a_used` as for far_from_suggested. Empty otherwise."""
    if config.kind != "sl" or not learning_rate_used or not train_rows or train_rows >= SMALL_DATASET:
        return ""
    passes = steps / max(1, train_rows // config.batch_size)  # as the run counts them (sl/loop.py passes_note)
    exposure = learning_rate_used * passes
    measured = measured_for(config)
    if builtin_spec(config.dataset) == "builtin:facts":
        if measured is None or lora_a_used != measured.lora_a:
            risky = True
        else:
            risky = exposure > measured.learning_rate * measured.num_epochs * 1.01
    else:
        risky = exposure >= OVERWRITE_EXPOSURE * 0.99
    if not risky:
        return ""
    return (
        f"{passes:.3g} pass{'' if abs(passes - 1) < 0.005 else 'es'} at rate {learning_rate_used:g} over "
        f"{train_rows} examples may overwrite what the model knew: "
        + FORGETTING_EXAMPLE
        + ". Mix in ordinary chats the model already answers (dataset=YOURS,builtin:replay), lower the rate or the "
        "passes, or fix LoRA's A away from ordinary chats (lora_a=null_space, builtin:facts), and add "
        "builtin:retention to the evaluations to see what was kept"
    )
