"""SL's data preparation: chat conversations loaded and validated (cookbook_engine.data), rendered to tokens and loss
weights (TrainOnWhat), fitted to max_length (truncating or dropping, with counts) and turned into datums: every check
that can fail on bad input runs here, before a run exists. Not here: the loop (loop.py).
"""

from __future__ import annotations

from tinker import types

from cookbook_engine import renderers
from cookbook_engine.config import SLConfig
from cookbook_engine.data import loading as datasets
from cookbook_engine.training.common import datum_from_tokens, fit_length, tokenizer_for
from cookbook_engine.training.plan import PreparedData


class PreparedSL(PreparedData[types.Datum]):
    """The rendered conversations: one datum each."""


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
