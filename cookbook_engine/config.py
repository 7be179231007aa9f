"""Typed run configurations and tinker-cookbook's `key=value` command-line convention.

One small dataclass per algorithm (SLConfig, DPOConfig, RLConfig) holds every setting a run needs, and each field
describes itself once (help, bounds, choices: cookbook_engine/settings.py; how the form draws it is app/'s). From those
descriptions come `validate()` (the same checks as `--dry-run`), the CLI's `--help`, and the New run form's widgets'
bounds and help. Nested sections are written `section.name=value`: `pipelining.*` (RL) and `clocked.*` (the clocked
backend's own settings, backends/clocked_settings.py); the flat names runs were stored with before still load (ALIASES).
The CLI and the studio's forms both build a config and hand it to the RunManager; `to_command()` gives the equivalent
`cookbook ...` line. This module builds no heavy objects: loading models and data happens in the loops."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from dataclasses import dataclass
from typing import Any

from cookbook_engine import device, trackers
from cookbook_engine.backends.clocked_settings import ClockedConfig
from cookbook_engine.data import mix
from cookbook_engine.data.loading import DEFAULT_SEED, DEFAULT_TEST_FRACTION, DatasetError
from cookbook_engine.device import DTYPES
from cookbook_engine.models import DEFAULT_MODEL
from cookbook_engine.rl.advantages import SCALE_REWARDS
from cookbook_engine.rl.multi_turn import MULTI_TURN_ENVS  # episodes of several turns: they need max_turns
from cookbook_engine.rl.suggested import ARITHMETIC as RL_MEASURED, train_mlp_used
from cookbook_engine.rl.tools import TOOLS
from cookbook_engine.settings import (
    Leaf,
    bound_problems,
    build,
    flatten,
    help_lines,
    leaves,
    redefault,
    section,
    setting,
)
from cookbook_engine.training import lora_a
from storage.input_error import InputError

BACKENDS = ("local", "tinker", "clocked")
SCHEDULES = ("linear", "cosine", "constant")
TRAIN_ON = ("last_assistant_message", "all_assistant_messages", "all_messages")
OVERLONG = ("truncate", "drop")
RL_ENVS = ("arithmetic", "code", "custom", "calculator")
RL_LOSSES = ("importance_sampling", "ppo")
GRADERS = ("exact", "numeric", "contains", "regex", "python_tests")
DISTILL_MODES = ("on_policy", "prompt")
LORA_RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Flat names that settings had before they moved into a section: runs stored with them, and commands written with
# them, still work.
ALIASES = {
    "stream_minibatch": "pipelining.stream_minibatch",
    "num_minibatches": "pipelining.num_minibatches",
    "max_steps_off_policy": "pipelining.max_steps_off_policy",
    "clock_period_s": "clocked.period_s",
    "clock_samples_per_tick": "clocked.samples_per_tick",
}


ANCHOR_HELP = "Ordinary chats kept as the base model answers them, trained beside the run's data (anchor.dataset)"


class ConfigError(InputError, ValueError):
    """A bad setting; the message names the setting and what is wrong with it."""


@dataclass
class CommonConfig:
    model: str = setting(
        DEFAULT_MODEL,
        help="Base model to fine-tune with LoRA: a Hugging Face name or local model "
        "folder (backend=local), or a Tinker model name (backend=tinker)",
    )
    backend: str = setting(
        "local",
        choices=BACKENDS,
        help="local (this machine), tinker (the hosted service) or clocked (the local backend "
        "admitted at clock ticks, to count pipelining cycles)",
    )
    device: str = setting("auto", help="backend=local: auto (CUDA, then MPS, then CPU), cpu, cuda or mps")
    dtype: str = setting(
        "auto",
        choices=DTYPES,
        help="backend=local: the base model's compute precision. auto = bf16 on CUDA GPUs that run it fast and on "
        "CPUs with AMX or AVX-512 BF16 where a short calibration confirms it is faster, fp32 elsewhere; LoRA "
        "weights and optimizer state stay fp32",
    )
    renderer: str = setting(
        "auto",
        help="How chats become tokens. auto = the model's own chat template (ChatML for the "
        "default model); role_colon for base models without one.",
    )
    name: str = setting("", help="Shown in the studio; defaults to the run id")
    lora_rank: int | None = setting(
        None,
        min=1,
        max=512,
        options=LORA_RANKS,
        help=f"Rank of the LoRA adapter; auto = the rank measured for built-in data with the run's lora_a (the SFT "
        f"demo's facts: 8), else {lora_a.DEFAULT_LORA_RANK}",
    )
    train_attn: bool = setting(
        True, help="LoRA on the attention projections (q, k, v, o); a run from a checkpoint keeps the checkpoint's"
    )
    train_mlp: bool | None = setting(
        True,
        help="LoRA on the MLP projections (gate, up, down); auto (RL's default) = attention only where that was "
        "measured better (the default model on the arithmetic env), the MLP too elsewhere; a run from a checkpoint "
        "keeps the checkpoint's",
    )
    learning_rate: float | None = setting(
        None,
        min=0,
        min_open=True,
        max=1,
        max_open=True,
        step=1e-5,
        why="LoRA uses 1e-5 to 1e-2; leave it unset or write learning_rate=auto for the model's suggested rate",
        help="auto = the rate measured for built-in data, or the model's suggested rate",
    )
    lr_schedule: str = setting(
        "linear",
        choices=SCHEDULES,
        help="How the learning rate changes over the run",
    )
    batch_size: int = setting(8, min=1, max=4096, help="Examples per optimizer step")
    num_epochs: int = setting(1, min=1, max=1000, help="Passes over the training data")
    max_steps: int = setting(
        0,
        min=0,
        max=1_000_000,
        zero_means="as many as the epochs give",
        help="Optimizer steps at most",
    )
    max_length: int = setting(
        1024,
        min=16,
        max=131072,
        help="Longest example in tokens (longer ones are truncated or dropped)",
    )
    save_every: int = setting(
        20,
        min=0,
        max=1_000_000,
        zero_means="only at the end",
        help="Save a checkpoint every this many steps",
    )
    eval_every: int = setting(
        10,
        min=0,
        max=1_000_000,
        zero_means="only at the end",
        help="Evaluate every this many steps",
    )
    evals: str = setting(
        "", help="Eval sets run every eval_every steps and at the end, logged as test/<set>/<metric> (comma-separated)"
    )
    seed: int = setting(
        DEFAULT_SEED,
        min=0,
        max=2**31 - 1,
        help="Random seed (LoRA initialization, data order, sampling)",
    )
    beta1: float = setting(0.9, min=0, max=1, max_open=True, help="Adam's beta1")
    beta2: float = setting(0.95, min=0, max=1, max_open=True, help="Adam's beta2")
    eps: float = setting(1e-12, min=0, min_open=True, max=1, help="Adam's epsilon")
    weight_decay: float = setting(0.0, min=0, max=10, help="Decoupled weight decay")
    grad_clip_norm: float = setting(
        0.0,
        min=0,
        max=1e6,
        zero_means="off",
        help="Clip the gradient's norm to this",
    )
    log_to: str = setting(
        "",
        options=trackers.TRACKER_NAMES,
        help="Experiment trackers to log the settings, each step's metrics and the checkpoints' paths to, besides the "
        "studio: wandb, mlflow, tensorboard (comma-separated; each an optional package: "
        f"{trackers.INSTALL_HINT}). A tracker that fails mid-run is logged and dropped; training goes on",
    )
    wandb_project: str = setting(
        "",
        help=f"W&B project (tinker-cookbook's key; naming one also turns W&B on). Empty: {trackers.DEFAULT_PROJECT}. "
        "WANDB_MODE=offline logs to the run folder only; WANDB_ENTITY picks the team",
    )
    wandb_name: str = setting("", help="W&B run name (tinker-cookbook's key). Empty: the run's name")
    mlflow_tracking_uri: str = setting(
        "",
        help="MLflow tracking URI (a server, sqlite:///file.db or file:/folder). Empty: MLFLOW_TRACKING_URI, else the "
        f"file store {trackers.MLFLOW_FOLDER}/ in the studio home",
    )
    mlflow_experiment: str = setting("", help=f"MLflow experiment. Empty: {trackers.DEFAULT_PROJECT}")
    clocked: ClockedConfig = section(ClockedConfig, help="The clocked simulator's own settings (backend=clocked)")

    @property
    def kind(self) -> str:
        raise NotImplementedError


@dataclass
class AnchorConfig:
    """Ordinary chats a run keeps answering as the base model does (training/anchor.py): every step also trains
    `rows` of them toward the base model's own next-token distribution, beside the run's own data."""

    dataset: str = setting(
        "",
        help="Chats to keep as the base model answers them, e.g. builtin:replay (292 ordinary questions): each step "
        "also trains some of them toward the base model's own next-token distribution. Empty: off",
    )
    rows: int = setting(4, min=1, max=1024, help="Anchor chats trained each step")
    coef: float = setting(
        1.0, min=0, min_open=True, max=1000, help="Weight of the anchor's loss beside the run's own loss"
    )


@dataclass
class RLAnchorConfig(AnchorConfig):
    """RL's anchor, off by default like SL's and DPO's since 2026-12-02 (rl/suggested.py): on the arithmetic env the
    default's B decays where ordinary chats read its fixed A instead, which kept every ordinary answer in 7 minutes
    where the anchor lost 4 in 11. Turned on (anchor.dataset=builtin:replay) it trains 8 chats a step at weight 3, as
    measured with A trained: over seeds 0, 1 and 2 it kept 0.952 of the base model's ordinary answers against 0.899
    without, with the same held-out accuracy (docs/DEFAULTS.md)."""

    dataset: str = redefault(AnchorConfig, "dataset", RL_MEASURED.anchor_dataset)
    rows: int = redefault(AnchorConfig, "rows", RL_MEASURED.anchor_rows)
    coef: float = redefault(AnchorConfig, "coef", RL_MEASURED.anchor_coef)


@dataclass
class SLConfig(CommonConfig):
    dataset: str = setting(
        "builtin:facts",
        help="Training data: builtin:NAME, a .jsonl/.json/.csv/.parquet file, or hf:owner/name; or a mix of several "
        "with weights, comma-separated, each NAME:WEIGHT (builtin:facts:2,my.jsonl:1: two thirds facts)",
    )
    test_dataset: str = setting("", help="A held-out data file (empty: test_fraction of the training data)")
    test_fraction: float = setting(
        DEFAULT_TEST_FRACTION,
        min=0,
        max=1,
        max_open=True,
        step=0.05,
        help="Share of the training data held out for evaluation",
    )
    train_on_what: str = setting(
        "last_assistant_message",
        choices=TRAIN_ON,
        help="Which tokens the loss applies to.",
    )
    overlong: str = setting(
        "truncate",
        choices=OVERLONG,
        help="What happens to an example longer than max_length",
    )
    max_examples: int = setting(
        0,
        min=0,
        max=10_000_000,
        zero_means="all",
        help="Train on at most this many examples",
    )
    anchor: AnchorConfig = section(AnchorConfig, help=ANCHOR_HELP)
    lora_a: str = setting(
        "auto",
        choices=lora_a.LORA_A,
        help="LoRA's input side: trained, as usual; or null_space, fixed to the input directions where the data's "
        "chats differ most from ordinary chats, training B alone, so the model's answers to ordinary questions stay "
        "(local backend, builtin:facts; B also decays where ordinary chats still read those directions; "
        "training/lora_a.py). auto: null_space where that was measured (the default model on builtin:facts), "
        "trained elsewhere",
    )

    @property
    def kind(self) -> str:
        return "sl"


@dataclass
class DPOConfig(CommonConfig):
    dataset: str = setting("builtin:concise-prefs", help="Preference pairs: builtin:NAME, a file, or hf:owner/name")
    test_fraction: float = redefault(SLConfig, "test_fraction", DEFAULT_TEST_FRACTION)
    dpo_beta: float = setting(
        0.1,
        min=0,
        min_open=True,
        max=100,
        help="How far the policy may move from the reference.",
    )
    rpo_alpha: float = setting(
        1.0,
        min=0,
        max=100,
        zero_means="plain DPO",
        help="Weight of the chosen replies' own loss (mean cross-entropy per token) added to DPO's, as TRL's "
        "rpo_alpha: keeps the chosen replies likely so the model does not drift off both sides (measured: 1 kept "
        "55 more of 322 ordinary answers than plain DPO; docs/DEFAULTS.md).",
    )
    start_checkpoint: str = setting(
        "",
        help="A saved state to start from; its run becomes the parent",
    )
    max_examples: int = redefault(SLConfig, "max_examples", 0)
    anchor: AnchorConfig = section(AnchorConfig, help=ANCHOR_HELP)
    lora_a: str = setting(
        "auto",
        choices=lora_a.LORA_A,
        help="LoRA's input side: trained, as usual; or null_space, fixed to the input directions where the pairs' "
        "chats differ most from ordinary chats, training B alone, so the model's answers to ordinary questions stay "
        "(local backend, builtin:concise-prefs; training/lora_a.py). auto: null_space where that was measured (the "
        "default model on builtin:concise-prefs), trained elsewhere",
    )

    @property
    def kind(self) -> str:
        return "dpo"


@dataclass
class PipeliningConfig:
    """RL's pipelining modes, tinker-cookbook's StreamMinibatchConfig and AsyncConfig (their groups_per_batch is
    ours): streaming minibatches (on-policy) or off-policy sampling, not both."""

    stream_minibatch: bool = setting(
        False,
        help="On-policy: train each minibatch of groups as soon as it is sampled, overlapping sampling with training.",
    )
    num_minibatches: int = setting(
        1,
        min=1,
        max=4096,
        help="With streaming: forward_backward calls per optimizer substep; must divide the groups per substep.",
    )
    max_steps_off_policy: int = setting(
        0,
        min=0,
        max=1000,
        zero_means="on-policy",
        help="Keep sampling in the background with the newest weights; groups "
        "sampled more than this many steps ago are dropped and sampled again. "
        "Not with streaming.",
    )


@dataclass
class RLConfig(CommonConfig):
    env: str = setting(
        "arithmetic",
        help="arithmetic and code are built in; custom is your own prompt/answer file (dataset=) scored by grader=; "
        "or a mix of several with weights, arithmetic:2,code:1 (each step's groups split by weight)",
    )
    dataset: str = setting("", help="env=custom: a prompt/answer file")
    max_turns: int = setting(
        3,
        min=0,
        max=64,
        zero_means="no limit (refused by multi-turn envs)",
        help="env=calculator (multi-turn): the most replies the model writes per episode; a reply still calling a "
        "tool at the limit ends the episode without an answer",
    )
    tools: str = setting(
        "calculator",
        help="env=calculator: the tools the model may call, comma-separated (calculator: <calc>2 * 3</calc>)",
    )
    grader: str = setting("numeric", choices=GRADERS, help="env=custom: how a reply is scored against the answer")
    # The defaults of group size, groups, tokens, temperature and steps are the measured ones (rl/suggested.py)
    group_size: int = setting(
        RL_MEASURED.group_size,
        min=2,
        max=256,
        why="advantages compare samples within a group",
        help="Samples per problem; advantages compare them.",
    )
    groups_per_batch: int = setting(
        RL_MEASURED.groups_per_batch,
        min=1,
        max=4096,
        help="Problems per step",
    )
    max_tokens: int = setting(
        RL_MEASURED.max_tokens,
        min=1,
        max=32768,
        help="Most tokens sampled per reply",
    )
    temperature: float = setting(
        RL_MEASURED.temperature,
        min=0,
        max=2,
        step=0.05,
        help="Sampling temperature while training",
    )
    top_p: float = setting(
        0.9,
        min=0,
        min_open=True,
        max=1,
        step=0.05,
        help="Sample from the smallest set of tokens with this much probability",
    )
    loss_fn: str = setting(
        "importance_sampling",
        choices=RL_LOSSES,
        help="importance_sampling (REINFORCE with importance weights) or ppo (clipped ratios, thresholds below).",
    )
    scale_rewards: str = setting(
        RL_MEASURED.scale_rewards,
        choices=SCALE_REWARDS,
        help="none: a sample's advantage is its reward minus its group's mean (tinker-cookbook); group: that divided "
        "by the group's standard deviation too (GRPO's paper, TRL's default), so a group with one right reply of "
        "eight weighs more",
    )
    partial_credit: float = setting(
        RL_MEASURED.partial_credit,
        min=0,
        max=0.9,
        step=0.1,
        help="arithmetic: a wrong answer written with as many digits as the right one scores this × the share of "
        "its digits in place (for 57 + 49 = 106: 96 scores 0, 116 two thirds of it); 0 = right or wrong only. Never a "
        "hedge, never as much as a right answer",
    )
    clip_low_threshold: float = setting(
        0.8,
        min=0,
        min_open=True,
        max=1,
        help="ppo: the lowest probability ratio kept",
    )
    clip_high_threshold: float = setting(
        1.2,
        min=1,
        max=100,
        help="ppo: the highest probability ratio kept",
    )
    num_substeps: int = setting(
        1,
        min=1,
        max=64,
        help="Optimizer steps per batch (its groups split evenly)",
    )
    max_steps: int = redefault(CommonConfig, "max_steps", RL_MEASURED.max_steps)
    train_mlp: bool | None = redefault(CommonConfig, "train_mlp", None)  # auto: rl/suggested.train_mlp_used
    lora_a: str = setting(
        "auto",
        choices=lora_a.LORA_A,
        help="LoRA's input side: trained, as usual; or null_space, fixed to the input directions where the task's "
        "chats differ most from ordinary chats, training B alone, so the model's answers to ordinary questions stay "
        "(local backend, arithmetic env; training/lora_a.py). auto: null_space where that was measured (the "
        "default model on the arithmetic env), trained elsewhere",
    )
    num_eval_problems: int = setting(
        32,
        min=0,
        max=100_000,
        help="Held-out problems scored at each evaluation",
    )
    eval_temperature: float = setting(
        0.0, min=0, zero_means="greedy, one sample per problem", help="Sampling temperature of the held-out accuracy"
    )
    test_fraction: float = setting(
        0.2, min=0, max=1, max_open=True, help="env=custom: the share of the file held out for evaluation"
    )
    lr_schedule: str = redefault(CommonConfig, "lr_schedule", "constant")  # as tinker-cookbook's rl/train does
    start_checkpoint: str = redefault(DPOConfig, "start_checkpoint", "")
    batch_size: int = redefault(CommonConfig, "batch_size", 8)  # RL batches: groups × group size
    num_epochs: int = redefault(CommonConfig, "num_epochs", 1)  # env=custom only; not in the form
    kl_penalty_coef: float = setting(
        0.0,
        min=0,
        max=100,
        zero_means="no KL penalty",
        help="Penalise each sampled token by its log-prob ratio to the reference (tinker-cookbook's kl_penalty_coef); "
        "keeps the policy near what the model already knew.",
    )
    kl_reference: str = setting(
        "",
        help="The KL penalty's reference: empty for the base model, or a checkpoint path (its sampler weights)",
    )
    pipelining: PipeliningConfig = section(PipeliningConfig, help="Streaming minibatches or off-policy sampling")
    anchor: RLAnchorConfig = section(RLAnchorConfig, help=ANCHOR_HELP)

    @property
    def kind(self) -> str:
        return "rl"


@dataclass
class DistillConfig(CommonConfig):
    """Distillation, in tinker-cookbook's two ways. mode=on_policy (distillation/train_on_policy.py): the student
    samples replies to the prompts, the teacher scores the student's tokens, and the per-token reverse KL is the
    advantage. mode=prompt (recipes/prompt_distillation): the teacher answers the prompts with `context` before them,
    and the student is trained (SL) on those replies without the context."""

    mode: str = setting(
        "on_policy",
        choices=DISTILL_MODES,
        help="on_policy (the student samples, the teacher scores its tokens) or prompt (the teacher answers with "
        "`context`, the student learns its replies without it)",
    )
    teacher: str = setting(
        "",
        help="The teacher: base (the base model), a checkpoint path on this machine, or with backend=tinker a hosted "
        "model name",
    )
    context: str = setting(
        "",
        help="mode=prompt: what the teacher sees before each prompt and the student never does: a system prompt "
        "(text), builtin:NAME (builtin:pip: Pip's system prompt and two example turns), or a .json file of messages",
    )
    dataset: str = setting(
        "builtin:facts",
        help="Prompts the student answers: a chat dataset (its conversations up to the last reply) or a prompt file",
    )
    start_checkpoint: str = redefault(DPOConfig, "start_checkpoint", "")
    group_size: int = redefault(
        RLConfig,
        "group_size",
        4,
        min=1,
        why="",
        help="Replies sampled per prompt: by the student (on_policy) or by the teacher (prompt)",
    )
    groups_per_batch: int = redefault(RLConfig, "groups_per_batch", 8)
    max_tokens: int = redefault(RLConfig, "max_tokens", 48)
    temperature: float = redefault(RLConfig, "temperature", 1.0)
    top_p: float = redefault(RLConfig, "top_p", 1.0)
    kl_penalty_coef: float = setting(
        1.0,
        min=0,
        min_open=True,
        max=100,
        help="Scales the per-token reverse KL to the teacher that the student is trained to reduce",
    )
    lr_schedule: str = redefault(CommonConfig, "lr_schedule", "constant")
    batch_size: int = redefault(
        CommonConfig, "batch_size", 8, help="mode=prompt: the teacher's replies per optimizer step"
    )  # on_policy batches are groups × group size

    @property
    def kind(self) -> str:
        return "distill"


CONFIG_TYPES: dict[str, type[CommonConfig]] = {
    "sl": SLConfig,
    "dpo": DPOConfig,
    "rl": RLConfig,
    "distill": DistillConfig,
}


def field_names(cls: type) -> list[str]:
    """Every setting's command-line name, sections' settings as `section.name`."""
    return [leaf.name for leaf in leaves(cls)]


def _coerce(leaf: Leaf, key: str, raw: str) -> Any:
    kind = leaf.kind
    if leaf.optional and raw.strip().lower() == "auto":
        return None  # learning_rate=auto: the model's suggested rate
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            value = float(raw)
            if not value.is_integer():
                raise ValueError
            return int(value)
        if kind is float:
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError
            return value
        return raw
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: expected {kind.__name__}") from None


def parse_overrides(kind: str, args: list[str]) -> CommonConfig:
    """Build a config from `key=value` words, rejecting unknown keys and values of the wrong type."""
    if kind not in CONFIG_TYPES:
        raise ConfigError(f"unknown run kind {kind!r}; choose one of {', '.join(CONFIG_TYPES)}")
    cls = CONFIG_TYPES[kind]
    by_name = {leaf.name: leaf for leaf in leaves(cls)}
    values: dict[str, Any] = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"{arg!r}: settings are written key=value (e.g. max_steps=20)")
        key, raw = arg.split("=", 1)
        key = key.strip()
        name = ALIASES.get(key, key)
        if name not in by_name:
            close = [k for k in by_name if key.split("_")[0] in k][:4]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"{key}: unknown setting for `cookbook {kind}`{hint}")
        values[name] = _coerce(by_name[name], key, raw)
    return build(cls, values)


# What a run stored before a setting existed trained with, where today's default differs: (kind, setting) -> value.
# from_dict fills it in, so such a run resumes and reads as it ran. Add a line whenever a new setting's default
# changes what a run does.
BEFORE_IT_EXISTED: dict[tuple[str, str], Any] = {
    ("rl", "scale_rewards"): "none",  # RL runs stored before the setting (2026-11-28) did not divide advantages
    ("rl", "train_mlp"): True,  # RL runs stored before the setting (2026-11-28) had LoRA on the MLP too
    ("rl", "partial_credit"): 0.0,  # RL runs stored before the setting (2026-11-28) scored wrong answers 0
    ("rl", "lora_a"): "trained",  # RL runs stored before the setting (2026-11-29) trained LoRA's A
    ("dpo", "lora_a"): "trained",  # DPO runs stored before the setting (2026-11-29) trained LoRA's A
    ("sl", "lora_a"): "trained",  # SL runs stored before the setting (2026-11-29) trained LoRA's A
}


def from_dict(kind: str, data: dict) -> CommonConfig:
    """A stored config (nested sections, or the flat names of runs stored before them); unknown keys are ignored."""
    cls = CONFIG_TYPES[kind]
    known = set(field_names(cls))
    flat = {ALIASES.get(k, k): v for k, v in flatten(data).items()}
    values = {k: v for k, v in flat.items() if k in known}
    if values.get("learning_rate") == 0:  # runs saved before learning_rate=auto wrote 0 for "suggested"
        values["learning_rate"] = None
    for (setting_kind, name), value in BEFORE_IT_EXISTED.items():
        if setting_kind == kind and name not in flat:
            values[name] = value
    return build(cls, values)


def with_values(config: CommonConfig, values: dict[str, Any]) -> CommonConfig:
    """`config` with some settings (command-line names) changed."""
    return build(type(config), {**flat_dict(config), **values})


def to_dict(config: CommonConfig) -> dict:
    return dataclasses.asdict(config)


def flat_dict(config: CommonConfig) -> dict[str, Any]:
    """Every setting by its command-line name (`pipelining.stream_minibatch`), as a person reads or diffs them."""
    return flatten(to_dict(config))


def to_command(config: CommonConfig) -> str:
    """The `cookbook ...` line that starts the same run (only settings that differ from the defaults)."""
    words = [f"cookbook {config.kind}"]
    values = flat_dict(config)
    for leaf in leaves(type(config)):
        value = values[leaf.name]
        if value != leaf.default:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            words.append(f"{leaf.name}={shlex.quote(text)}")
    return " ".join(words)


def usage(kind: str) -> str:
    """`cookbook KIND --help`: every setting with its default, help and bounds, from the fields' descriptions."""
    cls = CONFIG_TYPES[kind]
    return "\n".join(
        [
            f"usage: cookbook {kind} [key=value ...] [--dry-run]",
            "",
            f"Settings of `cookbook {kind}` (key=default  help [type, allowed values]):",
            *help_lines(cls),
            "",
            "Older names still accepted: "
            + ", ".join(f"{old} ({new})" for old, new in ALIASES.items() if new in field_names(cls)),
        ]
    )


def lora_layers_used(config: CommonConfig) -> dict[str, Any]:
    """The LoRA adapter a run of `config` trains, with its auto settings resolved (lora_rank, train_mlp): what a
    checkpoint of it holds, for the next stage that starts from it (lineage.py)."""
    return {"lora_rank": lora_a.rank_used(config), "train_attn": config.train_attn, "train_mlp": train_mlp_used(config)}


def validate(config: CommonConfig) -> list[str]:
    """Every problem with the settings themselves (checkpoint folders are checked by runs.checkpoint_problems, data
    and models by each loop's prepare): each value against its bounds and choices, then the rules that tie settings
    together."""
    problems = bound_problems(config)
    problems.extend(trackers.problems(config.log_to, config.wandb_project))
    if not (config.train_attn or train_mlp_used(config)):
        problems.append("train_attn, train_mlp: both false leaves LoRA nothing to train; set one of them true")
    if config.backend == "local":
        try:
            device.choose(config.device, dtype=config.dtype if config.dtype in DTYPES else "auto")
        except device.DeviceError as exc:
            problems.append(str(exc))
    if config.evals:
        from cookbook_engine.evals.sets import problems as eval_set_problems

        problems.extend(eval_set_problems(config.evals))
    if isinstance(config, SLConfig):
        problems.extend(sl_dataset_problems(config))
    if isinstance(config, DPOConfig) and not config.dataset.strip():
        problems.append("dataset: required (e.g. builtin:concise-prefs)")
    problems.extend(lora_a.problems(config))
    if isinstance(config, RLConfig):
        problems.extend(rl_env_problems(config))
        problems.extend(pipelining_problems(config))
    if isinstance(config, DistillConfig):
        problems.extend(distill_problems(config))
    return problems


def sl_dataset_problems(config: SLConfig) -> list[str]:
    """A dataset is named, and a mix of several (`a.jsonl:2,b.jsonl:1`) has weights summing to a positive number and
    no held-out file of its own (its datasets' held-out shares are its test sets)."""
    if not config.dataset.strip():
        return ["dataset: required (e.g. builtin:facts, a .jsonl file, or a mix: builtin:facts:2,my.jsonl:1)"]
    if not mix.is_mix(config.dataset):
        return []
    try:
        mix.parse_mix(config.dataset)
    except DatasetError as exc:
        return [str(exc)]
    if config.test_dataset.strip():
        return [f"test_dataset={config.test_dataset}: not with a mix of datasets; each one's test_fraction is held out"]
    return []


def rl_env_problems(config: RLConfig) -> list[str]:
    """The env is a known one, or a mix of known ones whose weights sum to a positive number (data/mix.py's syntax);
    custom, alone or in a mix, needs its prompt/answer file."""
    try:
        names = [part.spec for part in mix.parse_mix(config.env, "env")]
    except DatasetError as exc:
        return [str(exc)]
    unknown = [name for name in names if name not in RL_ENVS]
    if unknown:
        return [f"env={config.env}: unknown env {', '.join(unknown)}; choose from {', '.join(RL_ENVS)}"]
    if "custom" in names and not config.dataset.strip():
        return ["dataset: env=custom needs a prompt/answer file (dataset=path.jsonl)"]
    multi_turn = [name for name in names if name in MULTI_TURN_ENVS]
    if multi_turn and config.max_turns < 1:
        return [f"max_turns={config.max_turns}: env={multi_turn[0]} is multi-turn and needs a turn limit (e.g. 3)"]
    return tool_problems(config.tools) if multi_turn else []


def tool_problems(spec: str) -> list[str]:
    """The tools named are known ones, at least one."""
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names:
        return [f"tools: env=calculator needs a tool; choose from {', '.join(TOOLS)}"]
    unknown = [name for name in names if name not in TOOLS]
    if unknown:
        return [f"tools={spec}: unknown tool {', '.join(unknown)}; choose from {', '.join(TOOLS)}"]
    return []


def distill_problems(config: DistillConfig) -> list[str]:
    """A teacher is named and, on policy, is not the student itself (their KL would be 0: nothing to learn); prompt
    distillation needs a context (the teacher may be the student: the same model with and without it)."""
    teacher = config.teacher.strip()
    if not teacher:
        return ["teacher: required (base, a checkpoint path, or with backend=tinker a hosted model name)"]
    if config.mode == "prompt":
        if not config.context.strip():
            return ["context: mode=prompt needs the context the teacher sees (a system prompt, builtin:pip or a file)"]
        return [] if config.dataset.strip() else ["dataset: required (prompts, e.g. builtin:persona)"]
    student = config.start_checkpoint or "base"
    if teacher in (student, config.model if not config.start_checkpoint else student):
        return [
            f"teacher={teacher}: the teacher is the student ({student if config.start_checkpoint else 'the base model'}"
            "); name another checkpoint or model to distil from"
        ]
    if not config.dataset.strip():
        return ["dataset: required (prompts, e.g. builtin:facts)"]
    return []


def pipelining_problems(config: RLConfig) -> list[str]:
    """The RL pipelining settings: streaming minibatches (on-policy) or off-policy sampling, not both, and
    minibatches that split each substep's groups evenly (their bounds are checked with every other setting's)."""
    problems = []
    mode = config.pipelining
    if mode.stream_minibatch and mode.max_steps_off_policy > 0:
        problems.append(
            "pipelining.stream_minibatch=true and pipelining.max_steps_off_policy: choose one (streaming "
            "minibatches are on-policy; max_steps_off_policy > 0 samples in the background)"
        )
    if mode.num_minibatches > 1 and not mode.stream_minibatch:
        problems.append(
            f"pipelining.num_minibatches={mode.num_minibatches}: applies only with pipelining.stream_minibatch=true"
        )
    if mode.stream_minibatch and config.num_substeps >= 1 and mode.num_minibatches >= 1:
        if config.groups_per_batch % config.num_substeps:
            problems.append(
                f"stream_minibatch: num_substeps={config.num_substeps} must divide "
                f"groups_per_batch={config.groups_per_batch} (each substep trains whole groups)"
            )
        elif (config.groups_per_batch // config.num_substeps) % mode.num_minibatches:
            problems.append(
                f"stream_minibatch: pipelining.num_minibatches={mode.num_minibatches} must divide the "
                f"{config.groups_per_batch // config.num_substeps} groups of each substep "
                f"(groups_per_batch={config.groups_per_batch} / num_substeps={config.num_substeps})"
            )
    return problems


def check(config: CommonConfig) -> None:
    problems = validate(config)
    if problems:
        raise ConfigError("; ".join(problems))


def dumps(config: CommonConfig) -> str:
    return json.dumps({"kind": config.kind, **to_dict(config)}, indent=2)


__all__ = [
    "CommonConfig",
    "SLConfig",
    "DPOConfig",
    "RLConfig",
    "PipeliningConfig",
    "ClockedConfig",
    "ConfigError",
    "parse_overrides",
    "validate",
    "check",
    "to_command",
    "to_dict",
    "flat_dict",
    "from_dict",
    "with_values",
    "usage",
    "CONFIG_TYPES",
    "ALIASES",
]
