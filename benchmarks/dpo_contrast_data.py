"""Contrast-twin preference pairs for the experiment benchmarks/dpo_contrast_kinds.py (issue 23). Each pair has a
twin asking the same items with the relation flipped ("the second letter" for "the first letter", "lighter" for
"heavier", "before" for "after", "half" for "double"), where the chosen and rejected answers swap.

Across these pairs every answer string is chosen exactly as often as it is rejected, so no answer-side heuristic
("prefer the bigger number", "prefer the word's first letter") earns the preference; only reading the question does
(contrast sets, Gardner et al. 2020). Without them the built-in data taught its kinds' heuristics: 26 more kinds of
one-sided pairs took `builtin:prefs-unseen-kinds` from 0.642 to 0.583 (docs/DEFAULTS.md).

Rules: the facts are stated or computed here; no question shape of `prefs-unseen-kinds` (data/pref_kinds.py), none of
its words and none of `prefs-style-controlled`'s prompts or held-out letter words is asked, nor a `builtin:retention`
question; every pair is one sentence with the answer slot filled right (chosen) and wrong (rejected).

Not the default DPO data (builtin:concise-prefs, data/builtin.py): measured, 312 of these pairs with the default's read
0.711 and 0.676 on the unseen kinds on two draws (the default's pairs 0.672 and 0.657 on two seeds), inside every
interval, in 11 minutes of training against 4 (benchmarks/README.md).
"""

from __future__ import annotations

import random

from cookbook_engine.data import pref_kinds
from cookbook_engine.data.builtin import (
    LETTER_WORDS_HELD_OUT,
    PLURALS,
    PairRow,
    _normalised,
    _sentence_pair,
    retention_items,
    style_controlled_pairs,
)

TWINS_PER_KIND = 12  # twins of each generator (5x as many comparisons, the relation drawn for each)
SEED = 0

# Words whose letters are asked: none is a word of prefs-unseen-kinds or of prefs-style-controlled's first letters.
WORDS = (
    "apple",
    "barrel",
    "cherry",
    "tennis",
    "muffin",
    "father",
    "gravel",
    "hornet",
    "pillow",
    "sister",
    "temple",
    "lizard",
    "violet",
    "napkin",
    "oyster",
    "parrot",
    "quiver",
    "ribbon",
    "wallet",
    "turkey",
    "velvet",
    "walrus",
    "puzzle",
    "ginger",
    "bucket",
    "copper",
    "donkey",
    "falcon",
)
POSITIONS = ("first", "second", "third")
# (thing, value) lists ordered by one quantity; a pair asks about two of them.
WEIGHTS = (
    ("an ant", 1),
    ("a mouse", 2),
    ("a rabbit", 3),
    ("a cat", 4),
    ("a dog", 5),
    ("a pig", 6),
    ("a horse", 7),
    ("a rhino", 8),
    ("an elephant", 9),
    ("a blue whale", 10),
)
DURATIONS = (
    ("a second", 1),
    ("a minute", 2),
    ("an hour", 3),
    ("a day", 4),
    ("a week", 5),
    ("a month", 6),
    ("a year", 7),
    ("a decade", 8),
    ("a century", 9),
)
LEGS = (
    ("a snake", 0),
    ("a chicken", 2),
    ("a goat", 4),
    ("a beetle", 6),
    ("a spider", 8),
)
TEMPERATURES = (
    ("ice", 1),
    ("snow", 1),
    ("cold water", 2),
    ("warm soup", 3),
    ("boiling water", 4),
    ("a candle flame", 5),
    ("the sun", 6),
)
SPEEDS = (
    ("a snail", 1),
    ("a tortoise", 2),
    ("a chicken", 3),
    ("a rabbit", 4),
    ("a horse", 5),
    ("a cheetah", 6),
    ("a jet plane", 7),
)
CATEGORIES = (
    ("fruit", ("an apple", "a pear", "a plum", "a grape", "a peach", "a mango", "a cherry")),
    ("vegetable", ("a carrot", "a potato", "an onion", "a cabbage", "a leek", "a turnip", "a pea")),
    ("bird", ("a sparrow", "an eagle", "a robin", "a parrot", "a pigeon", "a crow", "a penguin")),
    ("fish", ("a salmon", "a trout", "a shark", "a tuna", "a cod", "a carp", "a herring")),
)
RELATIONS = (  # (things ordered by a quantity, the word asking for more of it, the word asking for less)
    (WEIGHTS, "heavier", "lighter"),
    (DURATIONS, "longer", "shorter"),
    (LEGS, "more legs", "fewer legs"),
    (TEMPERATURES, "hotter", "colder"),
    (SPEEDS, "faster", "slower"),
)
ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def _twins(kind: str, asks: tuple[tuple[str, str], tuple[str, str]], right_wrong: tuple[object, object]):
    """Two pairs: the first (prompt, template) prefers right over wrong, its twin wrong over right."""
    (prompt_a, template_a), (prompt_b, template_b) = asks
    right, wrong = str(right_wrong[0]), str(right_wrong[1])
    return [
        _sentence_pair(kind, prompt_a, template_a, right, wrong),
        _sentence_pair(kind, prompt_b, template_b, wrong, right),
    ]


def letter_position(rng: random.Random) -> list[PairRow]:
    word = rng.choice(WORDS)
    i, j = sorted(rng.sample(range(3), 2))
    if word[i] == word[j]:
        return []

    def ask(k: int) -> tuple[str, str]:
        return (
            f"What is the {POSITIONS[k]} letter of the word '{word}'?",
            f"The {POSITIONS[k]} letter of '{word}' is '{{}}'.",
        )

    return _twins("letter position", (ask(i), ask(j)), (word[i], word[j]))


def digit_position(rng: random.Random) -> list[PairRow]:
    tens, ones = rng.sample(range(1, 10), 2)
    n = 10 * tens + ones

    def ask(place: str) -> tuple[str, str]:
        return f"What is the {place} digit of {n}?", f"The {place} digit of {n} is {{}}."

    return _twins("digit position", (ask("tens"), ask("ones")), (tens, ones))


def number_neighbour(rng: random.Random) -> list[PairRow]:
    n = rng.randint(11, 98)
    asks = (
        (f"What number comes right after {n}?", f"The number right after {n} is {{}}."),
        (f"What number comes right before {n}?", f"The number right before {n} is {{}}."),
    )
    return _twins("number neighbour", asks, (n + 1, n - 1))


def alphabet_neighbour(rng: random.Random) -> list[PairRow]:
    i = rng.randint(1, 24)
    letter = ALPHABET[i]
    asks = (
        (
            f"Which letter comes right after '{letter}' in the alphabet?",
            f"The letter right after '{letter}' is '{{}}'.",
        ),
        (
            f"Which letter comes right before '{letter}' in the alphabet?",
            f"The letter right before '{letter}' is '{{}}'.",
        ),
    )
    return _twins("alphabet neighbour", asks, (ALPHABET[i + 1], ALPHABET[i - 1]))


def double_half(rng: random.Random) -> list[PairRow]:
    n = rng.randrange(4, 50, 2)
    asks = ((f"What is double {n}?", f"Double {n} is {{}}."), (f"What is half of {n}?", f"Half of {n} is {{}}."))
    return _twins("double or half", asks, (2 * n, n // 2))


def even_odd(rng: random.Random) -> list[PairRow]:
    even, odd = 2 * rng.randint(5, 49), 2 * rng.randint(5, 49) + 1
    a, b = (even, odd) if rng.random() < 0.5 else (odd, even)
    asks = (
        (f"Which number is even, {a} or {b}?", "The even number is {}."),
        (f"Which number is odd, {a} or {b}?", "The odd number is {}."),
    )
    return _twins("even or odd", asks, (even, odd))


def category(rng: random.Random) -> list[PairRow]:
    (name_a, items_a), (name_b, items_b) = rng.sample(CATEGORIES, 2)
    x, y = rng.choice(items_a), rng.choice(items_b)
    a, b = (x, y) if rng.random() < 0.5 else (y, x)
    asks = (
        (f"Which one is a {name_a}, {a} or {b}?", f"The {name_a} is {{}}."),
        (f"Which one is a {name_b}, {a} or {b}?", f"The {name_b} is {{}}."),
    )
    return _twins("category", asks, (x, y))


def plural_singular(rng: random.Random) -> list[PairRow]:
    noun, plural = rng.choice(PLURALS)
    asks = (
        (f"What is the plural of '{noun}'?", f"The plural of '{noun}' is '{{}}'."),
        (f"What is the singular of '{plural}'?", f"The singular of '{plural}' is '{{}}'."),
    )
    return _twins("plural or singular", asks, (plural, noun))


def comparison(rng: random.Random) -> list[PairRow]:
    things, more, less = rng.choice(RELATIONS)
    (x, vx), (y, vy) = rng.sample(things, 2)
    if vx == vy:
        return []
    big, small = (x, y) if vx > vy else (y, x)
    a, b = (x, y) if rng.random() < 0.5 else (y, x)

    def ask(word: str) -> tuple[str, str]:
        if " " in word:  # "more legs"
            return f"Which has {word}, {a} or {b}?", f"The one with {word} is {{}}."
        return f"Which is {word}, {a} or {b}?", f"The {word} one is {{}}."

    return _twins(f"{more} or {less}", (ask(more), ask(less)), (big, small))


KINDS = (
    letter_position,
    digit_position,
    number_neighbour,
    alphabet_neighbour,
    double_half,
    even_odd,
    category,
    plural_singular,
    comparison,
)


def contrast_pairs(per_kind: int = TWINS_PER_KIND, seed: int = SEED) -> list[PairRow]:
    """`per_kind` twins (2 x per_kind pairs) of each generator (5 x per_kind comparisons), shuffled, twins apart: no
    prompt twice, none asked by builtin:retention or by an eval set of preferences, and no word those sets ask about."""
    rng = random.Random(seed)
    held_out = pref_kinds.unseen_kind_pairs() + style_controlled_pairs()
    asked = {_normalised(item["prompt"]) for item in retention_items()} | {_normalised(p.prompt) for p in held_out}
    unseen_words = set(pref_kinds.WORDS) | set(LETTER_WORDS_HELD_OUT)
    rows: list[PairRow] = []
    for make in KINDS:
        count = per_kind * (len(RELATIONS) if make is comparison else 1)
        made = 0
        for _ in range(count * 50):
            twins = make(rng)
            prompts = [_normalised(t.prompt) for t in twins]
            if not twins or any(p in asked for p in prompts) or unseen_words & set(" ".join(prompts).split()):
                continue
            asked.update(prompts)
            rows += twins
            made += 1
            if made == count:
                break
    rng.shuffle(rows)
    return rows
