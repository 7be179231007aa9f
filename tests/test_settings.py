"""Each run setting is described once, on its dataclass field, and every front door follows that description: the
CLI's `--help` lists every setting with its help, validation refuses every value outside a setting's bounds or
choices with a message naming it, the New run form offers a widget for every setting marked for it (with the same
bounds), and configs stored before the pipelining and clocked settings moved into sections still load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from app.setting_inputs import form_settings
from app.setting_widgets import KINDS as WIDGET_KINDS, widget_for
from cookbook_engine import cli, config as cfg
from cookbook_engine.settings import Leaf, help_text, leaves

MAIN = Path(__file__).resolve().parent.parent / "app" / "main.py"
KINDS = list(cfg.CONFIG_TYPES)
ALL_LEAVES = [(kind, leaf) for kind in KINDS for leaf in leaves(cfg.CONFIG_TYPES[kind])]
BOUNDED = [
    (kind, leaf, side) for kind, leaf in ALL_LEAVES for side in ("min", "max") if getattr(leaf.spec, side) is not None
]
WITH_CHOICES = [(kind, leaf) for kind, leaf in ALL_LEAVES if leaf.spec.choices]


def outside(leaf: Leaf, side: str) -> Any:
    """The nearest value of the setting's type just outside one of its bounds."""
    spec = leaf.spec
    bound = spec.min if side == "min" else spec.max
    assert bound is not None
    if spec.min_open if side == "min" else spec.max_open:
        return leaf.kind(bound)
    step = 1 if leaf.kind is int else max(abs(bound) * 0.5, 0.5)
    return leaf.kind(bound - step if side == "min" else bound + step)


def test_every_setting_has_help_and_a_default_inside_its_own_bounds():
    for kind, leaf in ALL_LEAVES:
        assert leaf.spec.help.strip(), f"{kind}: {leaf.name} has no help text"
        widget = widget_for(kind, leaf.name)
        assert widget is None or widget.kind in WIDGET_KINDS, leaf
    for kind in KINDS:  # the defaults pass their own bounds; a distillation run has no default teacher to name
        required = ["teacher: required"] if kind == "distill" else []
        problems = cfg.validate(cfg.CONFIG_TYPES[kind]())
        assert [p.split(" (")[0] for p in problems] == required, (kind, problems)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_help_lists_every_setting_with_its_help(home, capsys, kind):
    assert cli.main([kind, "--help"]) == 0
    out = capsys.readouterr().out
    for leaf in leaves(cfg.CONFIG_TYPES[kind]):
        line = next((line for line in out.splitlines() if line.startswith(f"  {leaf.name}=")), None)
        assert line is not None, f"`cookbook {kind} --help` does not list {leaf.name}"
        assert help_text(leaf.spec) in line, line


@pytest.mark.parametrize("kind, leaf, side", BOUNDED, ids=[f"{k}-{leaf.name}-{side}" for k, leaf, side in BOUNDED])
def test_validation_refuses_a_value_outside_each_bound_naming_the_setting(kind, leaf, side):
    bad = outside(leaf, side)
    config = cfg.with_values(cfg.CONFIG_TYPES[kind](), {leaf.name: bad})
    problems = cfg.validate(config)
    assert any(problem.startswith(f"{leaf.name}={bad}: must be") for problem in problems), problems
    # the command line refuses it with the same message
    with pytest.raises(cfg.ConfigError, match=f"{leaf.name}="):
        cfg.check(cfg.parse_overrides(kind, [f"{leaf.name}={bad}"]))


@pytest.mark.parametrize("kind, leaf", WITH_CHOICES, ids=[f"{k}-{leaf.name}" for k, leaf in WITH_CHOICES])
def test_validation_refuses_a_value_outside_the_choices_naming_them(kind, leaf):
    problems = cfg.validate(cfg.parse_overrides(kind, [f"{leaf.name}=nonsense"]))
    assert f"{leaf.name}=nonsense: choose one of {', '.join(leaf.spec.choices)}" in problems


# A run stored before issue 17: pipelining and clocked settings were flat fields of the config.
STORED_RL_RUN = {
    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "backend": "clocked",
    "device": "auto",
    "renderer": "auto",
    "name": "old-run",
    "lora_rank": 8,
    "learning_rate": 0.0005,
    "lr_schedule": "constant",
    "batch_size": 8,
    "num_epochs": 1,
    "max_steps": 12,
    "max_length": 1024,
    "save_every": 20,
    "eval_every": 10,
    "evals": "",
    "seed": 0,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-12,
    "weight_decay": 0.0,
    "grad_clip_norm": 0.0,
    "clock_period_s": 0.2,
    "clock_samples_per_tick": 1,
    "env": "arithmetic",
    "dataset": "",
    "grader": "numeric",
    "group_size": 8,
    "groups_per_batch": 4,
    "max_tokens": 16,
    "temperature": 1.0,
    "top_p": 0.9,
    "loss_fn": "importance_sampling",
    "clip_low_threshold": 0.8,
    "clip_high_threshold": 1.2,
    "num_substeps": 2,
    "num_eval_problems": 32,
    "eval_temperature": 0.0,
    "test_fraction": 0.2,
    "start_checkpoint": "",
    "stream_minibatch": True,
    "num_minibatches": 2,
    "max_steps_off_policy": 0,
}


def test_a_config_stored_with_flat_pipelining_and_clock_names_still_loads():
    config = cfg.from_dict("rl", STORED_RL_RUN)
    assert isinstance(config, cfg.RLConfig)
    assert config.pipelining == cfg.PipeliningConfig(stream_minibatch=True, num_minibatches=2, max_steps_off_policy=0)
    assert config.clocked == cfg.ClockedConfig(period_s=0.2, samples_per_tick=1)
    assert config.name == "old-run" and config.num_substeps == 2 and cfg.validate(config) == []
    assert cfg.from_dict("rl", cfg.to_dict(config)) == config  # and stored again, it loads the same
    assert cfg.parse_overrides("rl", ["clock_period_s=0.2", "stream_minibatch=true"]).clocked.period_s == 0.2


def test_a_stored_run_without_a_newer_setting_loads_with_what_it_trained_with_not_todays_default():
    for (kind, name), before in cfg.BEFORE_IT_EXISTED.items():
        default = cfg.flat_dict(cfg.CONFIG_TYPES[kind]())[name]
        assert before != default, f"{kind} {name}: the entry is the default already; remove it"
        stored = cfg.to_dict(cfg.CONFIG_TYPES[kind]())
        section, _, leaf = name.rpartition(".")
        del (stored[section] if section else stored)[leaf]
        loaded = cfg.from_dict(kind, stored)
        assert cfg.flat_dict(loaded)[name] == before and cfg.validate(loaded) == []
        stored_now = cfg.to_dict(cfg.CONFIG_TYPES[kind]())
        assert cfg.flat_dict(cfg.from_dict(kind, stored_now))[name] == default  # a run stored with it keeps its value


def test_the_command_line_of_a_config_starts_the_same_config():
    config = cfg.with_values(
        cfg.RLConfig(),
        {
            "pipelining.max_steps_off_policy": 2,
            "clocked.period_s": 0.3,
            "backend": "clocked",
            "loss_fn": "ppo",
            "learning_rate": 1e-4,
        },
    )
    assert cfg.parse_overrides("rl", cfg.to_command(config).split()[2:]) == config


def new_run_form(kind: str, mode: str = "") -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.run()
    at.switch_page("../pages/new_run.py").run()
    at.get("button_group")[0].set_value(kind).run()  # the Algorithm picker
    if mode:  # a kind with modes (distillation) picks its mode above the form
        next(b for b in at.get("button_group") if b.label == "Distillation mode").set_value(mode).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


KINDS_AND_MODES = [(kind, "") for kind in KINDS if kind != "distill"] + [
    ("distill", mode) for mode in cfg.DISTILL_MODES
]


@pytest.mark.parametrize("kind,mode", KINDS_AND_MODES)
def test_the_new_run_form_offers_a_widget_for_every_form_setting_with_its_bounds(home, default_model_ready, kind, mode):
    at = new_run_form(kind, mode)
    if kind == "rl":  # Max turns and Tools are drawn for a multi-turn env only (tests/test_multi_turn.py)
        next(b for b in at.get("button_group") if b.label == "Environment").set_value("calculator").run()
    widgets = {
        "number": at.number_input,
        "select": at.selectbox,
        "tristate": at.selectbox,
        "checkbox": at.checkbox,
        "text": at.text_input,
        "textarea": at.text_area,
        "multiselect": at.multiselect,
    }
    cls = cfg.CONFIG_TYPES[kind]
    by_name = {leaf.name: leaf for leaf in leaves(cls)}
    for name in form_settings(cls, mode):
        spec, widget = by_name[name].spec, widget_for(kind, name, mode)
        assert widget is not None
        drawn = [w for w in widgets[widget.kind] if w.label == widget.label]
        assert len(drawn) == 1, f"{kind}: the form has no {widget.kind} labelled {widget.label!r} for {name}"
        if widget.kind == "number":
            proto = drawn[0].proto
            assert (proto.has_min, proto.has_max) == (spec.min is not None, spec.max is not None), name
            assert (proto.min, proto.max) == pytest.approx((spec.min or 0, spec.max or 0)), name
