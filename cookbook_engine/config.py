"""Typed run configurations and tinker-cookbook's `key=value` command-line convention.

One small dataclass per algorithm (SLConfig, DPOConfig, RLConfig) holds every setting a run needs; the CLI and the
studio's forms both build one, validate it with `validate()` (the same checks as `--dry-run`) and hand it to the
RunManager. `to_command()` gives the equivalent `cookbook ...` line. This module builds no heavy objects: loading
models and data happens in the loops.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types as pytypes
import typing
from dataclasses import dataclass, field

from cookbook_engine import device
from cookbook_engine.models import DEFAULT_MODEL
from cookbook_engine.rl.suggested import ARITHMETIC as RL_MEASURED
from storage.input_error import InputError

BACKENDS = ("local", "tinker", "clocked")
SCHEDULES = ("linear", "cosine", "constant")
TRAIN_ON = ("last_assistant_message", "all_assistant_messages", "all_messages")
OVERLONG = ("truncate", "drop")
RL_ENVS = ("arithmetic", "code", "custom")
RL_LOSSES = ("importance_sampling", "ppo")
GRADERS = ("exact", "numeric", "contains", "regex", "python_tests")


class ConfigError(InputError, ValueError):
    """A bad setting; the message names the setting and what is wrong with it."""


@dataclass
class CommonConfig:
    model: str = DEFAULT_MODEL
    backend: str = "local"
    device: str = "auto"  # backend=local: auto (CUDA, then MPS, then CPU), cpu, cuda or mps (device.py)
    renderer: str = "auto"
    name: str = ""
    lora_rank: int = 32
    learning_rate: float | None = None  # None (learning_rate=auto) = the model's suggested rate
    lr_schedule: str = "linear"
    batch_size: int = 8
    num_epochs: int = 1
    max_steps: int = 0  # 0 = as many as the epochs give
    max_length: int = 1024
    save_every: int = 20  # 0 = only at the end
    eval_every: int = 10  # 0 = only at the end
    evals: str = ""  # eval sets run every eval_every steps and at the end, logged as test/<set>/<metric>
    seed: int = 0
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0
    clock_period_s: float = 0.05  # backend=clocked only: the simulator's tick
    clock_samples_per_tick: int = 0  # backend=clocked only: sample requests admitted per tick (0 = all queued)

    @property
    def kind(self) -> str:
        raise NotImplementedError


@dataclass
class SLConfig(CommonConfig):
    dataset: str = "builtin:facts"
    test_dataset: str = ""
    test_fraction: float = 0.1
    train_on_what: str = "last_assistant_message"
    overlong: str = "truncate"
    max_examples: int = 0  # 0 = all

    @property
    def kind(self) -> str:
        return "sl"


@dataclass
class DPOConfig(CommonConfig):
    dataset: str = "builtin:concise-prefs"
    test_fraction: float = 0.1
    dpo_beta: float = 0.1
    start_checkpoint: str = ""  # a saved state to start from (its run becomes the parent)
    batch_size: int = 8
    max_examples: int = 0

    @property
    def kind(self) -> str:
        return "dpo"


@dataclass
class RLConfig(CommonConfig):
    env: str = "arithmetic"
    dataset: str = ""  # env=custom: a prompt/answer file
    grader: str = "numeric"  # env=custom
    # The defaults of group size, groups, tokens, temperature and steps are the measured ones (rl/suggested.py)
    group_size: int = RL_MEASURED.group_size
    groups_per_batch: int = RL_MEASURED.groups_per_batch
    max_tokens: int = RL_MEASURED.max_tokens
    temperature: float = RL_MEASURED.temperature
    top_p: float = 0.9
    loss_fn: str = "importance_sampling"
    clip_low_threshold: float = 0.8
    clip_high_threshold: float = 1.2
    num_substeps: int = 1
    max_steps: int = RL_MEASURED.max_steps
    num_eval_problems: int = 32
    eval_temperature: float = 0.0  # held-out accuracy: 0 = greedy, one sample per problem
    test_fraction: float = 0.2  # env=custom: the share of the file held out for evaluation
    lr_schedule: str = "constant"  # RL keeps its rate, as tinker-cookbook's rl/train does
    start_checkpoint: str = ""
    # Pipelining modes, tinker-cookbook's StreamMinibatchConfig and AsyncConfig (their groups_per_batch is ours):
    stream_minibatch: bool = False  # on-policy: train each minibatch of groups as soon as it is sampled
    num_minibatches: int = 1  # stream_minibatch: forward_backward calls per optimizer substep
    max_steps_off_policy: int = 0  # > 0: keep sampling while training, drop groups older than this many steps

    @property
    def kind(self) -> str:
        return "rl"


CONFIG_TYPES: dict[str, type[CommonConfig]] = {"sl": SLConfig, "dpo": DPOConfig, "rl": RLConfig}


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _field_type(cls: type, name: str) -> type:
    hints = typing.get_type_hints(cls)
    kind = hints[name]
    if isinstance(kind, pytypes.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return kind


def _coerce(cls: type, key: str, raw: str):
    kind = _field_type(cls, key)
    if key == "learning_rate" and raw.strip().lower() == "auto":
        return None  # the model's suggested rate
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
    known = field_names(cls)
    values = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"{arg!r}: settings are written key=value (e.g. max_steps=20)")
        key, raw = arg.split("=", 1)
        key = key.strip()
        if key not in known:
            close = [k for k in known if key.split("_")[0] in k][:4]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"{key}: unknown setting for `cookbook {kind}`{hint}")
        values[key] = _coerce(cls, key, raw)
    return cls(**values)


def from_dict(kind: str, data: dict) -> CommonConfig:
    cls = CONFIG_TYPES[kind]
    known = set(field_names(cls))
    values = {k: v for k, v in data.items() if k in known}
    if values.get("learning_rate") == 0:  # runs saved before learning_rate=auto wrote 0 for "suggested"
        values["learning_rate"] = None
    return cls(**values)


def to_dict(config: CommonConfig) -> dict:
    return dataclasses.asdict(config)


def to_command(config: CommonConfig) -> str:
    """The `cookbook ...` line that starts the same run (only settings that differ from the defaults)."""
    default = type(config)()
    words = [f"cookbook {config.kind}"]
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value != getattr(default, f.name):
            text = str(value).lower() if isinstance(value, bool) else str(value)
            words.append(f"{f.name}={_shell_quote(text)}")
    return " ".join(words)


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def validate(config: CommonConfig) -> list[str]:
    """Every problem with the settings themselves (files and models are checked by `check_resources`)."""
    problems = []

    def need(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    need(config.backend in BACKENDS, f"backend={config.backend}: choose one of {', '.join(BACKENDS)}")
    if config.backend == "local":
        try:
            device.choose(config.device)
        except device.DeviceError as exc:
            problems.append(str(exc))
    if config.learning_rate is not None:  # None = the model's suggested rate
        need(config.learning_rate > 0, f"learning_rate={config.learning_rate}: must be positive (leave it unset or "
                                       "write learning_rate=auto for the model's suggested rate)")
        need(config.learning_rate < 1, f"learning_rate={config.learning_rate}: far too large (LoRA uses 1e-5 to 1e-2)")
    need(config.lr_schedule in SCHEDULES, f"lr_schedule={config.lr_schedule}: choose one of {', '.join(SCHEDULES)}")
    need(config.lora_rank >= 1, f"lora_rank={config.lora_rank}: must be at least 1")
    need(config.lora_rank <= 512, f"lora_rank={config.lora_rank}: at most 512")
    need(config.batch_size >= 1, f"batch_size={config.batch_size}: must be at least 1")
    need(config.num_epochs >= 1, f"num_epochs={config.num_epochs}: must be at least 1")
    need(config.max_steps >= 0, f"max_steps={config.max_steps}: must be 0 (no limit) or more")
    need(config.max_length >= 16, f"max_length={config.max_length}: must be at least 16 tokens")
    need(config.save_every >= 0, f"save_every={config.save_every}: must be 0 (only at the end) or more")
    need(config.eval_every >= 0, f"eval_every={config.eval_every}: must be 0 (only at the end) or more")
    if config.evals:
        from cookbook_engine.evals.in_training import problems as eval_set_problems

        problems.extend(eval_set_problems(config.evals))
    need(0 <= config.beta1 < 1 and 0 <= config.beta2 < 1, "beta1 and beta2 must be in [0, 1)")
    need(config.eps > 0, f"eps={config.eps}: must be positive")
    need(config.weight_decay >= 0, f"weight_decay={config.weight_decay}: must be 0 or more")
    need(config.grad_clip_norm >= 0, f"grad_clip_norm={config.grad_clip_norm}: must be 0 (off) or more")
    need(config.clock_period_s > 0, f"clock_period_s={config.clock_period_s}: must be positive")
    need(config.clock_samples_per_tick >= 0,
         f"clock_samples_per_tick={config.clock_samples_per_tick}: must be 0 (all) or more")
    if isinstance(config, SLConfig):
        need(bool(config.dataset.strip()), "dataset: required (e.g. builtin:facts or a .jsonl file)")
        need(config.train_on_what in TRAIN_ON, f"train_on_what={config.train_on_what}: choose one of {', '.join(TRAIN_ON)}")
        need(config.overlong in OVERLONG, f"overlong={config.overlong}: choose one of {', '.join(OVERLONG)}")
        need(0 <= config.test_fraction < 1, f"test_fraction={config.test_fraction}: must be in [0, 1)")
        need(config.max_examples >= 0, f"max_examples={config.max_examples}: must be 0 (all) or more")
    if isinstance(config, DPOConfig):
        need(bool(config.dataset.strip()), "dataset: required (e.g. builtin:concise-prefs)")
        need(config.dpo_beta > 0, f"dpo_beta={config.dpo_beta}: must be positive")
        need(0 <= config.test_fraction < 1, f"test_fraction={config.test_fraction}: must be in [0, 1)")
    if isinstance(config, RLConfig):
        need(config.env in RL_ENVS, f"env={config.env}: choose one of {', '.join(RL_ENVS)}")
        need(config.env != "custom" or bool(config.dataset.strip()),
             "dataset: env=custom needs a prompt/answer file (dataset=path.jsonl)")
        need(config.grader in GRADERS, f"grader={config.grader}: choose one of {', '.join(GRADERS)}")
        need(config.group_size >= 2, f"group_size={config.group_size}: must be at least 2 (advantages compare "
                                     "samples within a group)")
        need(config.groups_per_batch >= 1, f"groups_per_batch={config.groups_per_batch}: must be at least 1")
        need(config.max_tokens >= 1, f"max_tokens={config.max_tokens}: must be at least 1")
        need(config.temperature >= 0, f"temperature={config.temperature}: must be 0 or more")
        need(0 < config.top_p <= 1, f"top_p={config.top_p}: must be in (0, 1]")
        need(config.loss_fn in RL_LOSSES, f"loss_fn={config.loss_fn}: choose one of {', '.join(RL_LOSSES)}")
        need(0 < config.clip_low_threshold <= 1 <= config.clip_high_threshold,
             "clip thresholds: need 0 < clip_low_threshold <= 1 <= clip_high_threshold")
        need(config.num_substeps >= 1, f"num_substeps={config.num_substeps}: must be at least 1")
        problems.extend(pipelining_problems(config))
        need(config.num_eval_problems >= 0, f"num_eval_problems={config.num_eval_problems}: must be 0 or more")
        need(config.eval_temperature >= 0, f"eval_temperature={config.eval_temperature}: must be 0 (greedy) or more")
        need(0 <= config.test_fraction < 1, f"test_fraction={config.test_fraction}: must be in [0, 1)")
    return problems


def pipelining_problems(config: RLConfig) -> list[str]:
    """The RL pipelining settings: streaming minibatches (on-policy) or off-policy sampling, not both."""
    problems = []
    if config.max_steps_off_policy < 0:
        problems.append(f"max_steps_off_policy={config.max_steps_off_policy}: must be 0 (on-policy) or at least 1")
    if config.num_minibatches < 1:
        problems.append(f"num_minibatches={config.num_minibatches}: must be at least 1")
    if config.stream_minibatch and config.max_steps_off_policy > 0:
        problems.append("stream_minibatch=true and max_steps_off_policy: choose one (streaming minibatches are "
                        "on-policy; max_steps_off_policy > 0 samples in the background)")
    if config.num_minibatches > 1 and not config.stream_minibatch:
        problems.append(f"num_minibatches={config.num_minibatches}: applies only with stream_minibatch=true")
    if config.stream_minibatch and config.num_substeps >= 1 and config.num_minibatches >= 1:
        if config.groups_per_batch % config.num_substeps:
            problems.append(f"stream_minibatch: num_substeps={config.num_substeps} must divide "
                            f"groups_per_batch={config.groups_per_batch} (each substep trains whole groups)")
        elif (config.groups_per_batch // config.num_substeps) % config.num_minibatches:
            problems.append(f"stream_minibatch: num_minibatches={config.num_minibatches} must divide the "
                            f"{config.groups_per_batch // config.num_substeps} groups of each substep "
                            f"(groups_per_batch={config.groups_per_batch} / num_substeps={config.num_substeps})")
    return problems


def check(config: CommonConfig) -> None:
    problems = validate(config)
    if problems:
        raise ConfigError("; ".join(problems))


def dumps(config: CommonConfig) -> str:
    return json.dumps({"kind": config.kind, **to_dict(config)}, indent=2)


__all__ = ["CommonConfig", "SLConfig", "DPOConfig", "RLConfig", "ConfigError", "parse_overrides", "validate",
           "check", "to_command", "to_dict", "from_dict", "CONFIG_TYPES", "field"]
