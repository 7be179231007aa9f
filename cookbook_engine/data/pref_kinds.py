"""Preference pairs of kinds the built-in DPO data never has, generated from facts this file states: the eval set
`builtin:prefs-unseen-kinds`, which asks whether DPO taught correctness as such or only its own kinds of question.

Every pair is one sentence with the answer slot filled twice, right (chosen) and wrong (rejected), so length and
style cannot decide. The kinds (UNSEEN_KINDS) share no question shape with builtin:concise-prefs (opposites,
plurals, past tenses, first letters, bigger numbers, sums, capitals): times tables, differences, the smaller
number, days and months in order, units, animal sounds and young, colours of things, last letters, letter counts
and words spelled backwards. The wrong answer is a near miss (a neighbouring number, the day before, another
animal's sound) where one exists.

Not here: the DPO training data (data/builtin.py), loading and scoring (evals/sets.py, evals/evaluators.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from cookbook_engine.data.builtin import PairRow

PER_KIND = 20
SEED = 31

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
SOUNDS = (
    ("dog", "barks"),
    ("cat", "meows"),
    ("cow", "moos"),
    ("duck", "quacks"),
    ("lion", "roars"),
    ("sheep", "bleats"),
    ("horse", "neighs"),
    ("pig", "oinks"),
    ("snake", "hisses"),
    ("owl", "hoots"),
    ("bee", "buzzes"),
    ("wolf", "howls"),
    ("frog", "croaks"),
    ("mouse", "squeaks"),
    ("rooster", "crows"),
)
YOUNG = (
    ("cat", "kitten"),
    ("dog", "puppy"),
    ("cow", "calf"),
    ("sheep", "lamb"),
    ("horse", "foal"),
    ("frog", "tadpole"),
    ("goat", "kid"),
    ("bear", "cub"),
    ("duck", "duckling"),
    ("kangaroo", "joey"),
    ("swan", "cygnet"),
    ("deer", "fawn"),
    ("goose", "gosling"),
    ("pig", "piglet"),
    ("owl", "owlet"),
)
COLOURS = (
    ("grass", "green"),
    ("snow", "white"),
    ("a ripe banana", "yellow"),
    ("coal", "black"),
    ("the sky on a clear day", "blue"),
    ("a ripe tomato", "red"),
    ("an orange", "orange"),
    ("milk", "white"),
    ("a lemon", "yellow"),
    ("a strawberry", "red"),
    ("a carrot", "orange"),
    ("chocolate", "brown"),
    ("a crow", "black"),
    ("a lime", "green"),
    ("blood", "red"),
)
WORDS = (
    "garden",
    "planet",
    "window",
    "basket",
    "silver",
    "rocket",
    "pencil",
    "forest",
    "candle",
    "button",
    "monkey",
    "orange",
    "winter",
    "bridge",
    "castle",
    "dinner",
    "flower",
    "jacket",
    "kitten",
    "ladder",
    "mirror",
    "pocket",
    "rabbit",
    "summer",
    "tunnel",
)
UNITS = (
    ("minutes", "hours", 60),
    ("hours", "days", 24),
    ("days", "weeks", 7),
    ("months", "years", 12),
    ("seconds", "minutes", 60),
    ("centimeters", "meters", 100),
    ("grams", "kilograms", 1000),
)


def _pair(kind: str, prompt: str, template: str, right: object, wrong: object) -> PairRow:
    return PairRow(kind, prompt, template.format(right), template.format(wrong))


def _near(rng: random.Random, value: int) -> int:
    return value + rng.choice([o for o in (-10, -2, -1, 1, 2, 10) if value + o >= 0])


def _times(rng: random.Random) -> PairRow:
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    wrong = rng.choice([a * (b + 1), a * (b - 1), a * b + 1, a * b - 2])
    return _pair("times table", f"What is {a} times {b}?", f"{a} times {b} is {{}}.", a * b, wrong)


def _difference(rng: random.Random) -> PairRow:
    a, b = rng.randint(20, 99), rng.randint(2, 19)
    return _pair("difference", f"What is {a} minus {b}?", f"{a} minus {b} is {{}}.", a - b, _near(rng, a - b))


def _smaller(rng: random.Random) -> PairRow:
    a, b = rng.sample(range(10, 100), 2)
    return _pair("smaller number", f"Which is smaller, {a} or {b}?", "The smaller number is {}.", min(a, b), max(a, b))


def _day_after(rng: random.Random) -> PairRow:
    index = rng.randrange(7)
    day = DAYS[index]
    right, wrong = DAYS[(index + 1) % 7], DAYS[index - 1]
    return _pair("day after", f"What day comes after {day}?", f"The day after {day} is {{}}.", right, wrong)


def _month_after(rng: random.Random) -> PairRow:
    index = rng.randrange(12)
    month = MONTHS[index]
    right, wrong = MONTHS[(index + 1) % 12], MONTHS[index - 1]
    return _pair("month after", f"Which month comes after {month}?", f"The month after {month} is {{}}.", right, wrong)


def _unit(rng: random.Random) -> PairRow:
    small, big, factor = rng.choice(UNITS)
    n = rng.randint(2, 9)
    right = n * factor
    wrong = rng.choice([(n + 1) * factor, (n - 1) * factor, right + 10])
    return _pair("units", f"How many {small} are in {n} {big}?", f"There are {{}} {small} in {n} {big}.", right, wrong)


def _sound(rng: random.Random) -> PairRow:
    animal, sound = rng.choice(SOUNDS)
    wrong = rng.choice([s for a, s in SOUNDS if a != animal])
    return _pair("animal sound", f"What sound does a {animal} make?", f"A {animal} {{}}.", sound, wrong)


def _young(rng: random.Random) -> PairRow:
    animal, young = rng.choice(YOUNG)
    wrong = rng.choice([y for a, y in YOUNG if a != animal])

    def named(word: str) -> str:
        return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"

    template = f"A baby {animal} is called {{}}."
    return _pair("animal young", f"What is a baby {animal} called?", template, named(young), named(wrong))


def _colour(rng: random.Random) -> PairRow:
    thing, colour = rng.choice(COLOURS)
    wrong = rng.choice(sorted({c for _, c in COLOURS if c != colour}))
    return _pair("colour", f"What colour is {thing}?", f"The colour of {thing} is {{}}.", colour, wrong)


def _last_letter(rng: random.Random) -> PairRow:
    word = rng.choice(WORDS)
    wrong = next(letter for letter in word if letter != word[-1])
    return _pair(
        "last letter",
        f"What is the last letter of '{word}'?",
        f"The last letter of '{word}' is '{{}}'.",
        word[-1],
        wrong,
    )


def _letter_count(rng: random.Random) -> PairRow:
    word = rng.choice(WORDS)
    right = len(word)
    return _pair(
        "letter count",
        f"How many letters are in the word '{word}'?",
        f"The word '{word}' has {{}} letters.",
        right,
        right + rng.choice([-1, 1, 2]),
    )


def _backwards(rng: random.Random) -> PairRow:
    word = rng.choice(WORDS)
    right = word[::-1]
    letters = list(right)
    i = rng.randrange(len(letters) - 1)
    letters[i], letters[i + 1] = letters[i + 1], letters[i]
    wrong = "".join(letters) if "".join(letters) != right else right[1:] + right[0]
    return _pair(
        "spelled backwards", f"Spell '{word}' backwards.", f"'{word}' spelled backwards is '{{}}'.", right, wrong
    )


KINDS: dict[str, Callable[[random.Random], PairRow]] = {
    "times table": _times,
    "difference": _difference,
    "smaller number": _smaller,
    "day after": _day_after,
    "month after": _month_after,
    "units": _unit,
    "animal sound": _sound,
    "animal young": _young,
    "colour": _colour,
    "last letter": _last_letter,
    "letter count": _letter_count,
    "spelled backwards": _backwards,
}
UNSEEN_KINDS = tuple(KINDS)


def unseen_kind_pairs(per_kind: int = PER_KIND) -> list[PairRow]:
    """`per_kind` distinct pairs of each kind in UNSEEN_KINDS (fewer where a kind has fewer), in a fixed shuffled
    order so the first N mix every kind."""
    rng = random.Random(SEED)
    rows: list[PairRow] = []
    for kind in UNSEEN_KINDS:
        seen: set[str] = set()
        for _ in range(per_kind * 20):
            pair = KINDS[kind](rng)
            if pair.prompt not in seen and pair.chosen != pair.rejected:
                seen.add(pair.prompt)
                rows.append(pair)
            if len(seen) == per_kind:
                break
    rng.shuffle(rows)
    return rows
