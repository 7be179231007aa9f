"""How a run's settings are shown: the learning rate and LoRA layers it actually uses (not "None" for auto), only the
settings that matter for its kind and backend, and a command line that works from this checkout.

Nothing here draws widgets; the Run, Compare and New run pages show what these return.
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.setting_widgets import MODE_ONLY
from cookbook_engine import config as cfg
from cookbook_engine.models import ModelError
from cookbook_engine.rl.suggested import train_mlp_used
from cookbook_engine.training.learning_rate import learning_rate, measured_rate
from cookbook_engine.training.lora_a import lora_a_used, rank_note

REPO = Path(__file__).resolve().parent.parent
# Settings a kind or backend ignores, left out of what a person reads.
UNUSED_BY_KIND = {"rl": ("batch_size",)}  # its batches are groups × group size (distillation's: by mode, below)
CLOCKED_ONLY = "clocked."  # the clocked backend's own section


def learning_rate_used(config: cfg.CommonConfig) -> float | None:
    """The base rate the run trains with (learning_rate_with_reason, the loops' own decision); None when the model
    cannot be resolved here (the rate stays "auto")."""
    try:
        return learning_rate(config)
    except ModelError:
        return None


def shown_settings(kind: str, settings: dict) -> dict:
    """A run's settings as a person should read them: the used learning rate, no settings its kind ignores."""
    config = cfg.from_dict(kind, settings)
    mode = getattr(config, "mode", "")  # a distillation run's other mode's settings are left out too
    hidden = set(UNUSED_BY_KIND.get(kind, ())) | {n for (k, n), only in MODE_ONLY.items() if k == kind and only != mode}
    shown = {
        k: v
        for k, v in cfg.flat_dict(config).items()
        if k not in hidden and (config.backend == "clocked" or not k.startswith(CLOCKED_ONLY))
    }
    if config.backend == "local":
        shown["dtype"] = compute_text(config)
    if config.learning_rate is None:
        used = learning_rate_used(config)
        measured_for = "this env" if config.kind == "rl" else "this dataset"
        whose = f"measured for {measured_for}" if measured_rate(config) else "the model's suggested rate"
        shown["learning_rate"] = f"auto ({used:.3g}, {whose})" if used else "auto"
    if config.lora_rank is None:
        shown["lora_rank"] = rank_note(config)
    if getattr(config, "lora_a", None) == "auto":
        shown["lora_a"] = f"auto ({lora_a_used(config)})"
    if config.train_mlp is None:
        attention_only = "off: attention only, measured for this model and env"
        shown["train_mlp"] = "auto (on)" if train_mlp_used(config) else f"auto ({attention_only})"
    return shown


def compute_text(config: cfg.CommonConfig) -> str:
    """The dtype setting with what it means on this machine and why (device.py decides; the calibration it may
    need is cached per CPU model, so this is the choice the run's worker made here)."""
    from cookbook_engine import device

    try:
        choice = device.choose(config.device, dtype=config.dtype)
    except device.DeviceError as exc:
        return f"{config.dtype} ({exc})"
    return f"{config.dtype}: {choice.label}. {choice.reason}"


def launcher() -> str:
    """How to call the CLI from this checkout: the venv's `cookbook` script when it exists, else `python -m`."""
    script = Path(sys.executable).parent / "cookbook"
    if script.exists():
        try:
            return str(script.relative_to(REPO))
        except ValueError:
            return str(script)
    return f"{sys.executable} -m cookbook_engine.cli"


def command_line(config: cfg.CommonConfig) -> str:
    """The command that starts the same run, runnable as copied (from the repository folder)."""
    return launcher() + cfg.to_command(config).removeprefix("cookbook")
