"""The New run form's widgets, drawn from the settings' own descriptions (cookbook_engine/settings.py: help, bounds,
choices) and their presentation (app/setting_widgets.py: widget, label, key).

`setting_input(where, config, name, key_of)` draws one setting: a number input with the setting's bounds, step and
help, a selectbox of its choices (auto first where the setting may be auto), a multiselect of its options (kept
comma-separated), a checkbox, an auto/on/off selectbox (a bool that may be auto), a text input or a text area,
labelled and keyed as setting_widgets.py says, and returns the value entered. `form_settings(cls, mode)` names the
settings a kind's form should offer, so a test can hold the form to it. Where the form lays the widgets out is
app/forms.py's business, not this module's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.setting_widgets import TRISTATE_LABELS, Widget, widget_for
from cookbook_engine import config as cfg
from cookbook_engine.settings import help_text, leaves, value_at


def kind_of(cls: type) -> str:
    return next(kind for kind, config_type in cfg.CONFIG_TYPES.items() if config_type is cls)


def form_settings(cls: type, mode: str = "") -> list[str]:
    """The settings the New run form offers for a config class (those setting_widgets.py gives a widget), in `mode`
    when the kind has modes (distillation: on_policy or prompt)."""
    kind = kind_of(cls)
    return [leaf.name for leaf in leaves(cls) if widget_for(kind, leaf.name, mode)]


def widget_key(name: str, widget: Widget) -> str:
    """The key suffix of a setting's widget (app/forms.key adds the kind and the form's generation)."""
    return widget.key or name.rsplit(".", 1)[-1]


def setting_input(where: Any, config: Any, name: str, key_of: Callable[[str], str], **overrides: Any) -> Any:
    """Draw setting `name` of `config` in the container `where` (st, a column, ...), keyed `key_of(suffix)`, and
    return what it holds. `overrides` are passed to the widget as they are (e.g. options known only at run time, a
    placeholder)."""
    leaf = next(leaf for leaf in leaves(type(config)) if leaf.name == name)
    spec, widget = leaf.spec, widget_for(kind_of(type(config)), name)
    if widget is None:
        raise ValueError(f"{name}: the form has no widget for it (app/setting_widgets.py)")
    value = value_at(config, name)
    label = widget.label or name
    kwargs: dict[str, Any] = {"key": key_of(widget_key(name, widget)), "help": help_text(spec)} | overrides
    if widget.kind == "text":
        return where.text_input(label, value=value, **kwargs)
    if widget.kind == "textarea":
        return where.text_area(label, value=value, **kwargs)
    if widget.kind == "checkbox":
        return where.checkbox(label, value=bool(value), **kwargs)
    if widget.kind == "tristate":  # a bool that may be auto (None)
        states = list(TRISTATE_LABELS)
        return where.selectbox(label, states, index=states.index(value), format_func=TRISTATE_LABELS.get, **kwargs)
    if widget.kind == "multiselect":  # the setting holds the chosen options comma-separated
        chosen = [item.strip() for item in str(value).split(",") if item.strip()]
        options = list(kwargs.pop("options", None) or spec.choices or spec.options)
        picked = where.multiselect(label, options + [c for c in chosen if c not in options], default=chosen, **kwargs)
        return ",".join(picked)
    if widget.kind == "select":
        options = list(kwargs.pop("options", None) or spec.choices or spec.options)
        if leaf.optional:  # "auto" first, as key=auto on the command line; it holds None (Streamlit's "no choice")
            auto = kwargs.pop("auto_label", "auto")  # what auto resolves to now, e.g. "auto (8, measured)"
            kwargs.setdefault("format_func", lambda option: auto if option == "auto" else str(option))
            options, value = ["auto", *options], "auto" if value is None else value
        fallback = options.index(leaf.default) if leaf.default in options else 0
        chosen = where.selectbox(label, options, index=options.index(value) if value in options else fallback, **kwargs)
        return None if leaf.optional and chosen == "auto" else chosen
    if widget.kind != "number":
        raise ValueError(f"{name}: the form has no {widget.kind!r} widget")
    number = float if leaf.kind is float else int
    if leaf.kind is float:
        kwargs.setdefault("format", "%g")
    if spec.step is not None:
        kwargs.setdefault("step", number(spec.step))
    return where.number_input(
        label,
        min_value=None if spec.min is None else number(spec.min),
        max_value=None if spec.max is None else number(spec.max),
        value=None if value is None else number(value),
        **kwargs,
    )
