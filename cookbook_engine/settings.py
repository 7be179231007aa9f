"""One description per run setting (help text, bounds, choices), kept as dataclass field metadata.

`setting(default, help=..., min=..., max=..., choices=...)` makes a config field carry a `Spec`;
`section()` nests a group of settings (written `section.name=value` on the command line). From these, `leaves()`
lists a config class's settings by their command-line names, `bound_problems()` checks values against their bounds
and choices (each message names the setting), `help_lines()` writes them for `--help`, and `build()` / `flatten()`
go between a config and `{name: value}`. The New run form draws its widgets from the same specs
(app/setting_inputs.py), with their widgets, labels and keys from app/setting_widgets.py.

Not here: which settings a run kind has (config.py), rules that tie several settings together, how a setting is
drawn (its widget and label: app/).
"""

from __future__ import annotations

import dataclasses
import types as pytypes
import typing
from dataclasses import dataclass, field
from typing import Any

SPEC_KEY = "cookbook_setting"


@dataclass(frozen=True)
class Spec:
    """How a setting is explained and bounded."""

    help: str
    min: float | None = None
    max: float | None = None
    min_open: bool = False  # the bound itself is refused (min=0, min_open=True: "must be positive")
    max_open: bool = False
    zero_means: str = ""  # what 0 means, said in the help and when a value is below 0
    why: str = ""  # added to a bound's message
    choices: tuple[str, ...] = ()  # the only values allowed
    options: tuple[Any, ...] = ()  # the values the form lists, where not every allowed value is a choice
    step: float | None = None  # the form's +/- step for a number


@dataclass(frozen=True)
class Leaf:
    """One setting of a config class: its command-line name (`pipelining.stream_minibatch`), type and spec."""

    name: str
    kind: type
    optional: bool  # None is allowed (learning_rate=auto)
    default: Any
    spec: Spec


def setting(
    default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING, **spec: Any
) -> Any:
    """A dataclass field that carries its description (the keywords of `Spec`)."""
    metadata = {SPEC_KEY: Spec(help=help, **spec)}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def section(factory: type, *, help: str) -> Any:
    """A nested group of settings (e.g. RLConfig.pipelining), each written `name.setting=value`."""
    return field(default_factory=factory, metadata={SPEC_KEY: Spec(help=help)})


def redefault(cls: type, name: str, default: Any, **changes: Any) -> Any:
    """The field `name` of `cls` with another default and the same description but for `changes` (keywords of
    `Spec`)."""
    original = next(f for f in dataclasses.fields(cls) if f.name == name)
    return field(default=default, metadata={SPEC_KEY: dataclasses.replace(spec_of(original), **changes)})


def spec_of(item: dataclasses.Field) -> Spec:
    return item.metadata.get(SPEC_KEY) or Spec(help="")


_LEAVES: dict[type, tuple[Leaf, ...]] = {}


def leaves(cls: type) -> tuple[Leaf, ...]:
    """Every setting of a config class in field order, nested sections' settings as `section.name`."""
    if cls not in _LEAVES:
        _LEAVES[cls] = _find_leaves(cls)
    return _LEAVES[cls]


def _find_leaves(cls: type) -> tuple[Leaf, ...]:
    hints = typing.get_type_hints(cls)
    found: list[Leaf] = []
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            found.extend(dataclasses.replace(leaf, name=f"{item.name}.{leaf.name}") for leaf in leaves(hint))
            continue
        kind, optional = _plain_type(hint)
        factory = item.default_factory
        default = item.default if factory is dataclasses.MISSING else factory()
        found.append(Leaf(item.name, kind, optional, default, spec_of(item)))
    return tuple(found)


def _plain_type(hint: Any) -> tuple[type, bool]:
    if isinstance(hint, pytypes.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        return next(a for a in args if a is not type(None)), type(None) in args
    return hint, False


def value_at(config: Any, name: str) -> Any:
    for part in name.split("."):
        config = getattr(config, part)
    return config


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"pipelining": {"stream_minibatch": True}}` -> `{"pipelining.stream_minibatch": True}`."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def build(cls: type, values: dict[str, Any]) -> Any:
    """A config of class `cls` from `{name: value}` (names as `leaves()` gives them); the rest keep defaults."""
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        head, _, rest = name.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            own[head] = value
    hints = typing.get_type_hints(cls)
    for head, section_values in nested.items():
        own[head] = build(hints[head], section_values)
    return cls(**own)


def bound_problems(config: Any) -> list[str]:
    """Every setting outside its bounds or choices, each message naming the setting and its value."""
    problems = [bound_problem(leaf, value_at(config, leaf.name)) for leaf in leaves(type(config))]
    return [problem for problem in problems if problem]


def bound_problem(leaf: Leaf, value: Any) -> str | None:
    spec = leaf.spec
    if value is None:
        return None
    if spec.choices and value not in spec.choices:
        return f"{leaf.name}={value}: choose one of {', '.join(spec.choices)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    why = f" ({spec.why})" if spec.why else ""
    if spec.min is not None and (value <= spec.min if spec.min_open else value < spec.min):
        return f"{leaf.name}={value}: {_below_message(spec)}{why}"
    if spec.max is not None and (value >= spec.max if spec.max_open else value > spec.max):
        return f"{leaf.name}={value}: must be {'below' if spec.max_open else 'at most'} {number_text(spec.max)}{why}"
    return None


def _below_message(spec: Spec) -> str:
    if spec.min_open:
        return "must be positive" if spec.min == 0 else f"must be above {number_text(spec.min)}"
    if spec.min == 0:
        return f"must be 0 ({spec.zero_means}) or more" if spec.zero_means else "must be 0 or more"
    return f"must be at least {number_text(spec.min)}"


def number_text(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def bounds_text(spec: Spec) -> str:
    """The allowed values in a few words: `one of a, b`, `in [0, 1)`, `at least 1`."""
    if spec.choices:
        return "one of " + ", ".join(spec.choices)
    if spec.min is not None and spec.max is not None:
        return (
            f"in {'(' if spec.min_open else '['}{number_text(spec.min)}, {number_text(spec.max)}"
            f"{')' if spec.max_open else ']'}"
        )
    if spec.min is not None:
        return f"{'above' if spec.min_open else 'at least'} {number_text(spec.min)}"
    if spec.max is not None:
        return f"{'below' if spec.max_open else 'at most'} {number_text(spec.max)}"
    return ""


def help_text(spec: Spec) -> str:
    """The help with what 0 means, as the form and `--help` show it."""
    return f"{spec.help} (0 = {spec.zero_means})" if spec.zero_means else spec.help


def help_lines(cls: type) -> list[str]:
    """One line per setting for `--help`: `name=default  help [type, bounds]`."""
    lines = []
    for leaf in leaves(cls):
        default = "auto" if leaf.default is None else str(leaf.default).lower() if leaf.kind is bool else leaf.default
        facts = ", ".join(part for part in (leaf.kind.__name__, bounds_text(leaf.spec)) if part)
        lines.append(f"  {leaf.name}={default!s}  {help_text(leaf.spec)} [{facts}]")
    return lines
