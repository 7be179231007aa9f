"""SL's data preparation: chat conversations loaded and validated (cookbook_engine.data), rendered to tokens and loss
weights (TrainOnWhat), fitted to max_length (truncating or dropping, with counts) and turned into datums: every check
that can fail on bad input runs here, before a run exists. A mix of datasets (`dataset=a:2,b:1`, data/mix.py) is
each dataset prepared so, then drawn into one epoch by weight, each dataset's held-out datums kept apart for its
own `test/<name>/nll`. Not here: the loop (loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tinker import types

from cookbook_engine import renderers
from cookbook_engine.config import SLConfig
from cookbook_engine.data import loading as datasets, mix
from cookbook_engine.training.common import datum_from_tokens, fit_length, tokenizer_for
from cookbook_engine.training.plan import PreparedData


@dataclass
class MixedTask:
    """One dataset of a mix: its name in metrics, weight, training rows and held-out datums."""

    name: str
    weight: float
    train_rows: int
    examples: int  # how many of an epoch's examples it gives
    test: list[types.Datum]


@dataclass
class PreparedSL(PreparedData[types.Datum]):
    """The rendered conversations: one datum each. A mix also has its datasets (`tasks`) and, by training datum, the
    dataset it came from."""

    tasks: list[MixedTask] = field(default_factory=list)
    task_of: dict[int, str] = field(default_factory=dict)  # id(datum) -> its dataset's name

    def summary(self) -> str:
        text = super().summary()
        if not self.tasks:
            return text
        each = ", ".join(
            f"{t.name} (weight {t.weight:g}: {t.examples} examples from {t.train_rows} rows)" for t in self.tasks
        )
        return f"{text}; a mix of {each} per epoch"


def render_examples(conversations: list[list[dict]], renderer, config: SLConfig) -> tuple[list[types.Datum], int, int]:
    datums, truncated, dropped = [], 0, 0
    for conversation in conversations:
        tokens, weights = renderer.build_supervised_example(conversation, config.train_on_what)
        fitted = fit_length(tokens, weights, config.max_length, config.overlong)
        if fitted is None:
            dropped += 1
            continue
        truncated += len(fitted[0]) < len(tokens)
        datums.append(datum_from_tokens(*fitted))
    return datums, truncated, dropped


def prepare(config: SLConfig) -> PreparedSL:
    tokenizer = tokenizer_for(config)
    renderer = renderers.get_renderer(config.renderer, tokenizer)
    if mix.is_mix(config.dataset):
        return prepare_mix(config, renderer)
    data = datasets.load_chat_dataset(
        config.dataset,
        test_fraction=config.test_fraction,
        test_spec=config.test_dataset or None,
        seed=config.seed,
        max_examples=config.max_examples or None,
    )
    train, truncated, dropped = render_examples(data.train, renderer, config)
    test, _, _ = render_examples(data.test, renderer, config)
    if not train:
        raise datasets.DatasetError(
            f"{config.dataset}: no example fits max_length={config.max_length} with tokens left to train on"
        )
    return PreparedSL(train, test, truncated, dropped, renderer.name, sum(d.model_input.length for d in train))


def prepare_mix(config: SLConfig, renderer) -> PreparedSL:
    """Each dataset of the mix loaded, split and rendered on its own (max_examples caps each), then one epoch drawn
    from them by weight."""
    parts = mix.parse_mix(config.dataset)  # config.validate has refused a test_dataset beside a mix
    trains, tests, truncated, dropped = [], [], 0, 0
    for part in parts:
        data = datasets.load_chat_dataset(
            part.spec, test_fraction=config.test_fraction, seed=config.seed, max_examples=config.max_examples or None
        )
        train, cut, gone = render_examples(data.train, renderer, config)
        if not train and part.weight > 0:
            raise datasets.DatasetError(
                f"{part.spec}: no example fits max_length={config.max_length} with tokens left to train on"
            )
        trains.append(train)
        tests.append(render_examples(data.test, renderer, config)[0])
        truncated, dropped = truncated + cut, dropped + gone
    counts = mix.shares(parts, [len(train) for train in trains])
    epoch = mix.mixed(trains, counts, config.seed)
    tasks = [MixedTask(p.name, p.weight, len(tr), n, te) for p, tr, n, te in zip(parts, trains, counts, tests)]
    task_of = {id(datum): part.name for part, train in zip(parts, trains) for datum in train}
    test = [datum for held_out in tests for datum in held_out]
    tokens = sum(d.model_input.length for d in epoch)
    return PreparedSL(epoch, test, truncated, dropped, renderer.name, tokens, tasks, task_of)
