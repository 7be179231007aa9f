"""One home for the learning rate (cookbook_engine/training/learning_rate.py): for every built-in dataset or env,
model and kind, the rate the New run form shows for learning_rate=auto is the rate the loop trains with (read from
the loop's own first log line, run on fake clients), and the reason says where it came from. No other module decides
a rate: the form has no fallback of its own, and an unknown model is an error, not an invented rate."""

from __future__ import annotations

import re

import pytest
from test_loop_plan import (
    NO_ANCHOR,
    FakeContext,
    FakeSamplingClient,
    dpo_prepared,
    fake_rl_steps,
    rl_prepared,
    run_loop,
    sl_prepared,
)

from app import forms
from cookbook_engine import config as cfg, models
from cookbook_engine.data.builtin import BUILTIN
from cookbook_engine.dpo import loop as dpo_loop
from cookbook_engine.runs import loop_module
from cookbook_engine.training import learning_rate as lr

ENGINE = cfg.__file__.rsplit("/", 1)[0]
MODELS = [  # (model, backend): the default local model and hosted models with and without the formula's numbers
    (models.DEFAULT_MODEL, "local"),
    ("meta-llama/Llama-3.1-8B", "tinker"),
    ("Qwen/Qwen3-8B", "tinker"),
    ("acme/Unknown-3B", "tinker"),
]


def builtin_of(kind: str) -> list[dict]:
    return [{"dataset": f"builtin:{name}"} for name, d in BUILTIN.items() if d.kind == kind]


DATA = {  # every built-in dataset or env of each kind, and a file that nothing was measured on
    "sl": [*builtin_of("chat"), {"dataset": "x.jsonl"}],
    "dpo": [*builtin_of("preference"), {"dataset": "pairs.jsonl"}],
    "rl": [{"env": "arithmetic"}, {"env": "code"}] + [{"env": "custom", **data} for data in builtin_of("rl")],
}
CASES = [(kind, data, model, backend) for kind, datas in DATA.items() for data in datas for model, backend in MODELS]


class NotingContext(FakeContext):
    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__(stop_after)
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def trained_rate(config: cfg.CommonConfig, monkeypatch: pytest.MonkeyPatch) -> str:
    """The base rate the loop says it trains with ('lr 0.002' in its first log line), as the loop formats it."""
    prepared = {"sl": lambda: sl_prepared(4), "dpo": lambda: dpo_prepared(4), "rl": lambda: rl_prepared(config)}[
        config.kind
    ]()
    if config.kind == "dpo":
        monkeypatch.setattr(dpo_loop, "reference_sampling_client", lambda *args: FakeSamplingClient())
    if config.kind == "rl":
        fake_rl_steps(monkeypatch)
    monkeypatch.setattr("test_loop_plan.FakeContext", NotingContext)
    ctx = run_loop(loop_module(config.kind), config, prepared, monkeypatch)
    assert isinstance(ctx, NotingContext)
    found = re.search(r"\blr ([0-9.e+-]+)", ctx.notes[0])
    assert found, ctx.notes[0]
    return found.group(1)


@pytest.mark.parametrize("kind,data,model,backend", CASES)
def test_the_form_shows_the_rate_that_trains(kind, data, model, backend, monkeypatch):
    choice = forms._suggestion(model, backend)
    shown, reason = forms.suggested_rate(kind, choice, data)
    assert shown is not None and reason
    if kind == "rl":
        data = {**data, "anchor": NO_ANCHOR}
    data = {**data, "lora_a": "trained"}  # the fake training client fixes no A
    config = cfg.CONFIG_TYPES[kind](model=model, backend=backend, max_steps=1, eval_every=0, save_every=0, **data)
    assert f"{shown:g}" == trained_rate(config, monkeypatch)
    assert (shown, reason) == lr.learning_rate_with_reason(config)


def test_the_reason_says_where_the_rate_came_from():
    assert lr.learning_rate_with_reason(cfg.SLConfig(learning_rate=3e-4)) == (3e-4, "set for this run")
    assert "measured on builtin:facts" in lr.learning_rate_with_reason(cfg.SLConfig(dataset="builtin:facts"))[1]
    assert "sweep" in lr.learning_rate_with_reason(cfg.RLConfig())[1]
    dpo_rate, dpo_reason = lr.learning_rate_with_reason(cfg.DPOConfig(dataset="pairs.jsonl"))
    assert dpo_rate == pytest.approx(lr.model_rate(models.DEFAULT_MODEL, "local")[0] * lr.DPO_LR_SCALE)
    assert "DPO's default" in dpo_reason
    hosted = cfg.SLConfig(backend="tinker", model="meta-llama/Llama-3.1-8B")
    assert lr.learning_rate_with_reason(hosted)[1] == lr.HOSTED_REASON


def test_an_unknown_local_model_has_no_rate_in_the_form_or_the_engine():
    choice = forms._suggestion("/no/such/model/folder", "local")
    assert choice.error and forms.suggested_rate("sl", choice, {"dataset": "x.jsonl"}) == (None, "")
    with pytest.raises(models.ModelError):
        lr.learning_rate_with_reason(cfg.SLConfig(model="/no/such/model/folder"))


def test_no_other_module_decides_a_learning_rate():
    """The deleted deciders stay deleted: no function named like one, no form fallback rate."""
    from pathlib import Path

    root = Path(ENGINE).parent
    sources = [*Path(ENGINE).rglob("*.py"), *(root / "app").glob("*.py"), *(root / "pages").glob("*.py")]
    pattern = re.compile(r"def (sl|dpo|rl)_learning_rate|def learning_rate_for|suggested_lr or 1e-4")
    assert [str(path) for path in sources if pattern.search(path.read_text(encoding="utf-8"))] == []


def test_the_forms_caption_says_how_a_rate_was_measured_and_leaves_what_it_gave_to_the_help():
    """The RL rate's whole reason is a paragraph of every seed's figures; under the rate the form shows how it was
    measured and where the rest is (the widget's help shows the whole reason). Other reasons are short already."""
    rl_reason = lr.learning_rate_with_reason(cfg.RLConfig())[1]
    shown = forms.headline(rl_reason)
    assert shown.startswith("chosen by a small sweep of the default model on the arithmetic env")
    assert shown.endswith("(what it gave: the ? beside Learning rate, and docs/DEFAULTS.md)")
    assert "0.765" in rl_reason and "0.765" not in shown and len(shown) < len(rl_reason) / 3
    sl_reason = lr.learning_rate_with_reason(cfg.SLConfig(dataset="builtin:facts"))[1]
    assert forms.headline(sl_reason).startswith("measured on builtin:facts with the default model on a 2-core CPU (")
    for config in (cfg.DPOConfig(dataset="pairs.jsonl"), cfg.RLConfig(env="code"), cfg.SLConfig(learning_rate=3e-4)):
        reason = lr.learning_rate_with_reason(config)[1]
        assert forms.headline(reason) == reason
