"""The one home of the learning rate a run trains with: `learning_rate_with_reason(config) -> (rate, reason)`.

Every consumer calls it: the SL, DPO and RL loops (the rate they train with), the New run form (the rate and the
reason it shows for learning_rate=auto), the Run page's settings and, through the loops, the CLI and sweeps. The
decision: a set rate wins; else the rate measured for this kind, model and built-in data (sl/suggested.py,
rl/suggested.py); else the model's suggested SL rate (`model_rate`: the Tinker cookbook's formula for hosted models,
the local model's own), scaled by DPO_LR_SCALE for DPO and RL_LR_SCALE for RL. An unknown model raises (ModelError):
no fallback rate is invented. Not here: LR schedules (common.py), the measurements themselves (*/suggested.py).
"""

from __future__ import annotations

from typing import Any

from cookbook_engine import models
from cookbook_engine.rl import suggested as rl_suggested
from cookbook_engine.rl.suggested import RL_LR_SCALE
from cookbook_engine.sl import suggested as sl_suggested

# DPO moves a model faster than SL on the same data: with learning_rate=auto it uses this share of the model's
# suggested (SL) rate. For the default model: 1e-3 * 0.2 = 2e-4.
DPO_LR_SCALE = 0.2
HOSTED_REASON = "the Tinker cookbook's LoRA learning-rate formula for this model"


def model_rate(model: str, backend: str) -> tuple[float, str]:
    """The model's suggested SL rate and why: hosted models by the Tinker cookbook's formula, local ones their own."""
    if backend == "tinker":
        from cookbook_engine.backends.tinker import suggested_learning_rate

        return suggested_learning_rate(model), HOSTED_REASON
    info = models.resolve(model)
    return info.suggested_learning_rate, info.learning_rate_reason


def measured_rate(config: Any) -> tuple[float, str] | None:
    """The rate measured for this kind, model and built-in data or env, with what the measurement showed."""
    if config.kind == "distill":  # no measurement yet: the model's SL rate (below)
        return None
    if config.kind == "rl":
        rl_measured = rl_suggested.measured_for(config)
        return (rl_measured.learning_rate, rl_suggested.measured_reason(rl_measured)) if rl_measured else None
    measured = sl_suggested.measured_for(config)
    return (measured.learning_rate, sl_suggested.reason(measured, config.dataset)) if measured else None


def learning_rate_with_reason(config: Any) -> tuple[float, str]:
    """The base rate a run of `config` trains with (before its schedule), and why it is that rate."""
    if config.learning_rate is not None:
        return config.learning_rate, "set for this run"
    measured = measured_rate(config)
    if measured is not None:
        return measured
    rate, why = model_rate(config.model, config.backend)
    if config.kind == "dpo":
        return rate * DPO_LR_SCALE, f"DPO's default is {DPO_LR_SCALE:g} × the model's SL rate ({rate:g}: {why})"
    if config.kind == "rl":
        return (
            rate * RL_LR_SCALE,
            f"not measured for this model and env: {RL_LR_SCALE:g} × the model's SL rate ({rate:g}: {why})",
        )
    return rate, why


def learning_rate(config: Any) -> float:
    """The base rate alone (what the loops train with)."""
    return learning_rate_with_reason(config)[0]
