"""DPO's data preparation: preference pairs loaded and validated (cookbook_engine.data), each side rendered to tokens
scored on its reply only, fitted to max_length (truncated, or the pair dropped), and how a tie between the two sides
is counted (`TIE_TOLERANCE`, shared with the preference evaluator). Not here: the loss and the loop (loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tinker import types

from cookbook_engine import renderers
from cookbook_engine.config import DPOConfig
from cookbook_engine.data import loading as datasets
from cookbook_engine.training.common import datum_from_tokens, fit_length, tokenizer_for
from cookbook_engine.training.plan import PreparedData

# A pair whose log-ratios differ by no more than this (nats) is a tie, counted in `ties` and not in `accuracy`: before
# training the policy is the reference, and rounding alone must not decide which side it "prefers". The evaluators
# (evals/evaluators.py) count preference accuracy the same way.
TIE_TOLERANCE = 1e-3


@dataclass
class PairDatums:
    chosen: types.Datum
    rejected: types.Datum


class PreparedDPO(PreparedData[PairDatums]):
    """The rendered pairs (their training tokens count both sides)."""

    items = "pairs"
    dropped_note = "pairs dropped (nothing left to score within max_length)"


def side_tokens(renderer, prompt: list[dict], continuation: list[dict]) -> tuple[list[int], list[float]]:
    """Tokens of prompt + continuation, weighted 1 on the continuation's assistant messages and 0 elsewhere."""
    tokens, weights = renderer.build_supervised_example(
        prompt + continuation, renderers.TrainOnWhat.ALL_ASSISTANT_MESSAGES
    )
    prompt_tokens = renderer.build_generation_prompt(prompt).to_ints()
    shared = 0
    while shared < min(len(tokens), len(prompt_tokens)) and tokens[shared] == prompt_tokens[shared]:
        shared += 1
    return tokens, [0.0] * shared + weights[shared:]


def render_pairs(pairs: list[datasets.PreferencePair], renderer, max_length: int) -> tuple[list[PairDatums], int, int]:
    rendered: list[PairDatums] = []
    truncated = dropped = 0
    for pair in pairs:
        sides: list[tuple[list[int], list[float]]] = []
        cut = False
        for continuation in (pair.chosen, pair.rejected):
            tokens, weights = side_tokens(renderer, pair.prompt, continuation)
            fitted = fit_length(tokens, weights, max_length, "truncate")
            if fitted is None:
                break
            sides.append(fitted)
            cut = cut or len(fitted[0]) < len(tokens)
        if len(sides) < 2:
            dropped += 1
            continue
        truncated += cut
        rendered.append(PairDatums(datum_from_tokens(*sides[0]), datum_from_tokens(*sides[1])))
    return rendered, truncated, dropped


def prepare(config: DPOConfig) -> PreparedDPO:
    tokenizer = tokenizer_for(config)
    renderer = renderers.get_renderer(config.renderer, tokenizer)
    train_pairs, test_pairs = datasets.load_preference_dataset(
        config.dataset, test_fraction=config.test_fraction, seed=config.seed, max_examples=config.max_examples or None
    )
    train, truncated, dropped = render_pairs(train_pairs, renderer, config.max_length)
    test, _, _ = render_pairs(test_pairs, renderer, config.max_length)
    if not train:
        raise datasets.DatasetError(
            f"{config.dataset}: no pair fits max_length={config.max_length} with tokens left to score on both sides"
        )
    tokens = sum(p.chosen.model_input.length + p.rejected.model_input.length for p in train)
    return PreparedDPO(train, test, truncated, dropped, renderer.name, tokens)
