"""How a run's settings are shown: the learning rate it actually uses (not "None" for learning_rate=auto), only the
settings that matter for its kind and backend, and a command line that works from this checkout.

Nothing here draws widgets; the Run, Compare and New run pages show what these return.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cookbook_engine import config as cfg

REPO = Path(__file__).resolve().parent.parent
# Settings a kind or backend ignores, left out of what a person reads.
UNUSED_BY_KIND = {"rl": ("batch_size",), "distill": ("batch_size",)}  # their batches are groups × group size
CLOCKED_ONLY = "clocked."  # the clocked backend's own section


def learning_rate_used(config: cfg.CommonConfig) -> float | None:
    """The base rate the run trains with: the set one, or for learning_rate=auto the measured rate for built-in data
    (cookbook_engine/sl/suggested.py) or the model's suggested rate (scaled for DPO and RL as their loops do); None
    when the model cannot be resolved here."""
    try:
        if isinstance(config, cfg.DPOConfig):
            from cookbook_engine.dpo.loop import dpo_learning_rate

            return dpo_learning_rate(config)
        if isinstance(config, cfg.RLConfig):
            from cookbook_engine.rl.loop import rl_learning_rate

            return rl_learning_rate(config)
        from cookbook_engine.sl.loop import sl_learning_rate

        return sl_learning_rate(config) if isinstance(config, cfg.SLConfig) else None
    except Exception:  # an unknown model or a backend missing from this build: the rate stays "auto"
        return None


def shown_settings(kind: str, settings: dict) -> dict:
    """A run's settings as a person should read them: the used learning rate, no settings its kind ignores."""
    config = cfg.from_dict(kind, settings)
    hidden = set(UNUSED_BY_KIND.get(kind, ()))
    shown = {
        k: v
        for k, v in cfg.flat_dict(config).items()
        if k not in hidden and (config.backend == "clocked" or not k.startswith(CLOCKED_ONLY))
    }
    if config.learning_rate is None:
        used = learning_rate_used(config)
        from cookbook_engine.sl import suggested

        whose = "measured for this dataset" if suggested.measured_for(config) else "the model's suggested rate"
        shown["learning_rate"] = f"auto ({used:.3g}, {whose})" if used else "auto"
    return shown


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
