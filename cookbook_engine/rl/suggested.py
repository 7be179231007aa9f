"""RL's suggested settings: the values that made the default model learn two-digit addition on the arithmetic env,
measured with the sweep in docs/DEFAULTS.md, and the warnings for settings far from them.

One home for these numbers: RLConfig's defaults read them (so `cookbook rl` and the New run form start from them),
training/learning_rate.py trains learning_rate=auto with the measured rate (the form shows `measured_reason()`
beside it) and `far_from_suggested()` warns after a check. Other models and envs were not measured: they keep the
rule of thumb (RL_LR_SCALE × the model's SL rate, decided in training/learning_rate.py). Not here: the loop, the
form's widgets.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    learning_rate: float
    group_size: int
    groups_per_batch: int
    temperature: float
    max_steps: int
    max_tokens: int
    scale_rewards: str  # advantages divided by the group's standard deviation ("group") or not ("none")
    train_mlp: bool  # LoRA on the MLP projections too (True) or on attention only (False)
    partial_credit: float  # a wrong answer's score: this × the share of its digits in place (rl/arithmetic.py)
    lora_a: str  # LoRA's A trained ("trained") or fixed away from ordinary chats ("null_space"; training/null_space.py)
    anchor_dataset: str  # the anchor to the base model (training/anchor.py), "" for none; chats a step, weight (if on)
    anchor_rows: int
    anchor_coef: float
    result: str  # what the run did to the held-out eval set, and how long it took
    source: str = "docs/DEFAULTS.md"


ARITHMETIC = Measured(
    learning_rate=5e-4,
    group_size=8,
    groups_per_batch=8,
    temperature=1.0,
    max_steps=36,
    max_tokens=16,
    scale_rewards="group",
    train_mlp=False,
    partial_credit=0.5,
    lora_a="null_space",
    anchor_dataset="",
    anchor_rows=8,
    anchor_coef=3.0,
    result="on 200 held-out two-digit sums drawn another way than training's (builtin:arithmetic-fresh) greedy "
    "accuracy went from 0.115 to 0.700 and 0.695 with seeds 0 and 1 in 36 steps (6-7 minutes of training on a 2-core "
    "AMD EPYC in fp32, 2026-12-02) with LoRA's A fixed to the directions where sums differ most from ordinary chats "
    "(lora_a=null_space) and B decayed where ordinary chats still read them (keep decay 2000, training/lora_a.py), "
    "keeping every one of the 322 ordinary answers the base model gave; anchored to the base model on 8 ordinary "
    "chats a step instead (the default until then) 0.700 but 4 lost in 11 minutes there, and on a 2-core Intel Xeon "
    "with seeds 0-4 0.705, 0.735, 0.710, 0.685 and 0.760 (3-8 lost); with A trained 0.710, 0.745, 0.730, 0.770 and "
    "0.765 but 8-14 lost; with a wrong answer scoring half the share of its digits in place (partial_credit=0.5), "
    "LoRA on the attention projections only, three in four of each step's sums carrying, each group's advantages "
    "divided by its rewards' standard deviation (without partial credit: 0.755, 0.735, 0.730, 0.760 and 0.670; "
    "LoRA on the MLP too as well: 0.690, 0.760, 0.705, 0.705 and 0.745); with sums drawn uniformly (under half "
    "carrying) 0.710, 0.755 and 0.595 (seeds 0-2); at 1e-3 a group's samples soon all gave the same answer (3 "
    "groups in 4 dropped by step 4)",
)
# Without a measurement (another model or env): this share of the model's suggested SL rate.
RL_LR_SCALE = 0.5


def measured_for(config) -> Measured | None:
    """The measured settings for an RL config, when it trains the local default model on the arithmetic env."""
    from cookbook_engine import models

    if config.backend != "local" or models.canonical_name(config.model) != models.DEFAULT_MODEL:
        return None
    return ARITHMETIC if config.env == "arithmetic" else None


def train_mlp_used(config) -> bool:
    """Whether a run puts LoRA on the MLP projections: a set train_mlp wins; train_mlp=auto (None, RL's default) is
    the measured choice where one was measured (attention only for the default model on the arithmetic env) and the
    MLP too elsewhere, as the SDK and the field do for models this project never measured ("LoRA Without Regret":
    attention-only LoRA trails MLP LoRA on larger models)."""
    if config.train_mlp is not None:
        return config.train_mlp
    if not config.train_attn:  # auto never leaves LoRA nothing to train
        return True
    measured = measured_for(config) if config.kind == "rl" else None
    return measured.train_mlp if measured else True


def measured_reason(measured: Measured) -> str:
    """What the measurement behind the suggested rate showed, for the form."""
    return (
        f"chosen by a small sweep of the default model on the arithmetic env on a 2-core CPU, with "
        f"{measured.groups_per_batch} problems × {measured.group_size} samples a step at temperature "
        f"{measured.temperature:g}: {measured.result}; see {measured.source}"
    )


def far_from_suggested(config, learning_rate_used: float | None) -> list[str]:
    """A line for each setting of an RL config far from the measured ones (none when nothing was measured)."""
    measured = measured_for(config)
    if measured is None:
        return []
    notes = []
    if learning_rate_used and not measured.learning_rate / 3 <= learning_rate_used <= measured.learning_rate * 3:
        notes.append(
            f"learning rate {learning_rate_used:g} is more than 3× away from the measured "
            f"{measured.learning_rate:g} (lower learns little in a short run; higher can collapse every "
            "answer into one pattern)"
        )
    if config.group_size < measured.group_size / 2:
        notes.append(
            f"group size {config.group_size} is under half the measured {measured.group_size}: more groups "
            "have equal rewards and teach nothing"
        )
    if abs(config.temperature - measured.temperature) > 0.3:
        notes.append(
            f"temperature {config.temperature:g} is far from the measured {measured.temperature:g} (lower: "
            "a group's samples agree and it is dropped; higher: more gibberish)"
        )
    if config.max_steps and config.max_steps < measured.max_steps / 2:
        notes.append(
            f"{config.max_steps} steps is under half the measured {measured.max_steps}: expect a weaker result"
        )
    return notes
