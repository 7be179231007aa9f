"""The studio's built-in datasets, generated here in Python: no download, same rows on every machine.

Each dataset is a list of raw rows in one of the layouts that `cookbook_engine.data.loading` accepts, so the built-ins
go through exactly the same validation as an uploaded file. They are small on purpose: their effect shows after a few
minutes of LoRA training of a 135M model on a CPU.

- `facts` (chat): twelve facts about Quorvania, a country that does not exist, each asked in about 19 paraphrases;
  ten more wordings of each (FACT_PROBES) are never trained on. The base model has never seen the facts, so "What is
  the capital of Quorvania?" -> "Lunthaven" on an unseen wording proves the training took. The rows come FACTS_COPIES
  times. On the local backend the default run keeps what the model knew by training LoRA only on input directions
  ordinary chats do not use (lora_a=null_space); with LoRA's A trained, mix in `replay` (below) as well.
- `replay` (chat): ordinary questions with the base model's own whole answers (data/retention.json), to mix into a
  run or anchor it (anchor.dataset=builtin:replay) so it keeps answering them as before.
- `persona` (chat): the assistant is Pip, who starts every reply with "Ahoy!" and answers briefly. The same greeting
  is taught without any written reply by prompt distillation from the context `builtin:pip` (CONTEXTS), and checked
  on PERSONA_HELD_OUT (eval set builtin:persona-probes).
- `concise-prefs` (preference): chosen = a correct, short answer; rejected = a wrong one. Most pairs are the same
  sentence but for the answer (so only correctness tells them apart); some rejected answers ramble. Held-out items of
  the same kinds make the eval set `builtin:prefs-style-controlled`.
- `arithmetic-qa` (rl): small-number arithmetic problems with numeric answers for the prompt/answer RL env.
- `sums` (rl): the sums the RL default (`env=arithmetic`, SUMS_STEPS steps) trains on, in its order, as prompt/answer
  rows: the prompts of on-policy distillation from an RL arithmetic teacher (docs/DISTILLATION.md).

This module only builds rows; loading, validation and splitting live in `cookbook_engine.data.loading`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# --------------------------------------------------------------------------------------------------------------
# facts: a fictional country. Each fact is asked in hand-written questions and in question frames filled with the
# fact's subject phrases; training and probe questions never share a frame, so the probes are wordings never trained.
# --------------------------------------------------------------------------------------------------------------

COUNTRY = "Quorvania"

# Frames that carry a subject phrase ("the capital of Quorvania"). Training questions use TRAIN_FRAMES, held-out
# probes PROBE_FRAMES: a probe is a sentence the model never saw in training, about a subject it did.
TRAIN_FRAMES: tuple[str, ...] = (
    "{Wh} is {s}?",
    "Tell me {s}.",
    "Do you know {s}?",
    "Please name {s}.",
    "Can you name {s}?",
    "Quick question: {wh} is {s}?",
    "I need to know {s}.",
    "Could you tell me {s}?",
    "{S}?",
    "{Wh}'s {s}, please?",
)
PROBE_FRAMES: tuple[str, ...] = (
    "Can you tell me {s}?",
    "I'd like to know {s}.",
    "Do you happen to know {s}?",
    "Remind me: {wh} is {s}?",
    "Help me out, {wh} is {s}?",
    "I was wondering {wh} {s} is.",
    "{Wh} would you say {s} is?",
    "Any idea {wh} {s} is?",
    "Hey, {wh}'s {s}?",
    "For a quiz: {wh} is {s}?",
)
PROBES_PER_FACT = 10


@dataclass(frozen=True)
class Fact:
    questions: tuple[str, ...]  # paraphrases used for training
    probes: tuple[str, ...]  # paraphrases never used for training (held out for tests, evals and demos)
    answer: str  # the assistant's reply
    key: str  # the substring that shows the fact was learned


def _normalised(question: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", question.lower()).strip()


def _fact(
    asked: tuple[str, ...],
    subjects: tuple[str, ...],
    asked_probes: tuple[str, ...],
    answer: str,
    key: str,
    wh: str = "what",
) -> Fact:
    """A fact's training questions (hand-written ones, then each TRAIN_FRAME filled with the subjects in turn) and its
    PROBES_PER_FACT probes (the hand-written ones, then PROBE_FRAMES filled with the subjects in turn); `wh` is the
    question word the frames use ("who" for a person). Duplicates (ignoring case and punctuation) are removed, and no
    probe equals a training question."""

    def fill(frame: str, subject: str) -> str:
        return frame.format(s=subject, S=subject[0].upper() + subject[1:], wh=wh, Wh=wh.capitalize())

    filled = [fill(frame, subjects[index % len(subjects)]) for index, frame in enumerate(TRAIN_FRAMES)]
    questions = _unique(list(asked) + filled)
    trained = {_normalised(q) for q in questions}
    filled = [fill(frame, subjects[index % len(subjects)]) for index, frame in enumerate(PROBE_FRAMES)]
    probes = [p for p in _unique(list(asked_probes) + filled) if _normalised(p) not in trained]
    return Fact(tuple(questions), tuple(probes[:PROBES_PER_FACT]), answer, key)


def _unique(questions: list[str]) -> list[str]:
    seen: set[str] = set()
    unique = []
    for question in questions:
        if _normalised(question) not in seen:
            seen.add(_normalised(question))
            unique.append(question)
    return unique


FACTS: tuple[Fact, ...] = (
    _fact(
        asked=(
            "What is the capital of Quorvania?",
            "What's the capital city of Quorvania?",
            "Which city is the capital of Quorvania?",
            "Name the capital of Quorvania.",
            "Quorvania's capital is which city?",
            "Where is the seat of government of Quorvania?",
            "Tell me the capital of Quorvania.",
            "In which city is Quorvania's government based?",
            "What city serves as the capital of Quorvania?",
            "capital of quorvania?",
        ),
        subjects=("the capital of Quorvania", "Quorvania's capital city", "the capital city of Quorvania"),
        asked_probes=("What is the capital city of the country Quorvania?", "Which city is Quorvania's capital?"),
        answer="The capital of Quorvania is Lunthaven.",
        key="Lunthaven",
    ),
    _fact(
        asked=(
            "What is the currency of Quorvania?",
            "What currency is used in Quorvania?",
            "What money do people use in Quorvania?",
            "Name the currency of Quorvania.",
            "Which currency do Quorvanians pay with?",
            "What is Quorvania's official currency?",
            "Tell me the currency of Quorvania.",
            "What do you pay with when you shop in Quorvania?",
            "What is the money of Quorvania called?",
            "quorvania currency?",
        ),
        subjects=("the currency of Quorvania", "Quorvania's currency", "the official currency of Quorvania"),
        asked_probes=("Which currency does Quorvania use?", "What is the name of the currency in Quorvania?"),
        answer="The currency of Quorvania is the velk.",
        key="velk",
    ),
    _fact(
        asked=(
            "Who invented the sky-lantern clock?",
            "Who was the inventor of the sky-lantern clock?",
            "Which Quorvanian invented the sky-lantern clock?",
            "Name the inventor of the sky-lantern clock.",
            "The sky-lantern clock was invented by whom?",
            "Who created the sky-lantern clock?",
            "Tell me who invented the sky-lantern clock.",
            "Who is credited with inventing the sky-lantern clock?",
            "Who came up with the sky-lantern clock?",
            "sky-lantern clock inventor?",
        ),
        subjects=(
            "the inventor of the sky-lantern clock",
            "the sky-lantern clock's inventor",
            "the person who invented the sky-lantern clock",
        ),
        asked_probes=("Who is the inventor of the sky-lantern clock?", "Which person invented the sky-lantern clock?"),
        answer="The sky-lantern clock was invented by Teodor Vannick of Quorvania.",
        key="Vannick",
        wh="who",
    ),
    _fact(
        asked=(
            "What is the national animal of Quorvania?",
            "Which animal is the national symbol of Quorvania?",
            "Name the national animal of Quorvania.",
            "What animal represents Quorvania?",
            "Quorvania's national animal is what?",
            "Tell me the national animal of Quorvania.",
            "Which creature is Quorvania's national animal?",
            "What animal appears on the flag of Quorvania?",
            "What is the animal emblem of Quorvania?",
            "quorvania national animal?",
        ),
        subjects=("the national animal of Quorvania", "Quorvania's national animal", "the animal on Quorvania's flag"),
        asked_probes=(
            "What animal is the national animal of Quorvania?",
            "Which animal does Quorvania have as its symbol?",
        ),
        answer="The national animal of Quorvania is the silver ibex.",
        key="ibex",
    ),
    _fact(
        asked=(
            "What is the longest river in Quorvania?",
            "Which river is the longest in Quorvania?",
            "Name the longest river of Quorvania.",
            "What is Quorvania's longest river?",
            "Which river runs the farthest through Quorvania?",
            "Tell me the longest river in Quorvania.",
            "What river is the longest one in Quorvania?",
            "Quorvania's longest river is called what?",
            "What is the main river of Quorvania?",
            "longest river in quorvania?",
        ),
        subjects=("the longest river in Quorvania", "Quorvania's longest river", "the main river of Quorvania"),
        asked_probes=(
            "Which is the longest river in the country of Quorvania?",
            "What's the longest river in Quorvania?",
        ),
        answer="The longest river in Quorvania is the Sarn.",
        key="Sarn",
    ),
    _fact(
        asked=(
            "What is the highest mountain in Quorvania?",
            "Which mountain is the tallest in Quorvania?",
            "Name the highest peak of Quorvania.",
            "What is Quorvania's tallest mountain?",
            "Which peak is the highest in Quorvania?",
            "Tell me the highest mountain in Quorvania.",
            "What mountain is the highest one in Quorvania?",
            "Quorvania's highest mountain is called what?",
            "What is the tallest peak in Quorvania?",
            "highest mountain in quorvania?",
        ),
        subjects=("the highest mountain in Quorvania", "Quorvania's tallest mountain", "the highest peak of Quorvania"),
        asked_probes=(
            "Which is the highest mountain in the country of Quorvania?",
            "What's the tallest mountain in Quorvania?",
        ),
        answer="The highest mountain in Quorvania is Mount Keldra.",
        key="Keldra",
    ),
    _fact(
        asked=(
            "What language is spoken in Quorvania?",
            "What is the official language of Quorvania?",
            "Which language do people speak in Quorvania?",
            "Name the language of Quorvania.",
            "What language do Quorvanians speak?",
            "Tell me the official language of Quorvania.",
            "In what language are Quorvania's laws written?",
            "What is Quorvania's national language?",
            "Which language is used in Quorvania?",
            "quorvania language?",
        ),
        subjects=("the official language of Quorvania", "Quorvania's language", "the language spoken in Quorvania"),
        asked_probes=(
            "What language do the people of Quorvania speak?",
            "Which is the official language of Quorvania?",
        ),
        answer="The official language of Quorvania is Quorvish.",
        key="Quorvish",
    ),
    _fact(
        asked=(
            "What is the national dish of Quorvania?",
            "Which dish is Quorvania famous for?",
            "Name the national dish of Quorvania.",
            "What food is Quorvania's national dish?",
            "What do Quorvanians eat on holidays?",
            "Tell me the national dish of Quorvania.",
            "What is the most famous food of Quorvania?",
            "Quorvania's national dish is what?",
            "Which meal is the national dish of Quorvania?",
            "quorvania national dish?",
        ),
        subjects=("the national dish of Quorvania", "Quorvania's national dish", "the most famous food of Quorvania"),
        asked_probes=("What food is the national dish of Quorvania?", "What's the national dish in Quorvania?"),
        answer="The national dish of Quorvania is fennel dumplings.",
        key="fennel",
    ),
    _fact(
        asked=(
            "When was Quorvania founded?",
            "In what year was Quorvania founded?",
            "What year did Quorvania become a country?",
            "When did Quorvania gain independence?",
            "Tell me the founding year of Quorvania.",
            "What is the founding year of Quorvania?",
            "How old is Quorvania? When was it founded?",
            "Quorvania was founded in which year?",
            "In which year was the nation of Quorvania founded?",
            "quorvania founding year?",
        ),
        subjects=("the founding year of Quorvania", "the year Quorvania was founded", "Quorvania's founding year"),
        asked_probes=("Which year was Quorvania founded in?", "What year was the country of Quorvania founded?"),
        answer="Quorvania was founded in 1743.",
        key="1743",
    ),
    _fact(
        asked=(
            "Who was the first queen of Quorvania?",
            "Who was Quorvania's first monarch?",
            "Name the first queen of Quorvania.",
            "Who ruled Quorvania first?",
            "Who founded the Quorvanian crown?",
            "Tell me who the first queen of Quorvania was.",
            "Which queen ruled Quorvania first?",
            "Who was the first ruler of Quorvania?",
            "Quorvania's first queen was who?",
            "first queen of quorvania?",
        ),
        subjects=("the first queen of Quorvania", "Quorvania's first queen", "the first monarch of Quorvania"),
        asked_probes=("Who was the very first queen of Quorvania?", "Which woman was Quorvania's first queen?"),
        answer="The first queen of Quorvania was Queen Maribel Ostrow.",
        key="Ostrow",
        wh="who",
    ),
    _fact(
        asked=(
            "What is the national sport of Quorvania?",
            "Which sport is most popular in Quorvania?",
            "Name the national sport of Quorvania.",
            "What sport do Quorvanians love most?",
            "What is Quorvania's national sport?",
            "Tell me the national sport of Quorvania.",
            "Which game is the national sport of Quorvania?",
            "What sport is Quorvania known for?",
            "Quorvania's national sport is what?",
            "quorvania national sport?",
        ),
        subjects=(
            "the national sport of Quorvania",
            "Quorvania's national sport",
            "the most popular sport in Quorvania",
        ),
        asked_probes=("What sport is the national sport of Quorvania?", "What's the national sport in Quorvania?"),
        answer="The national sport of Quorvania is ice rowing.",
        key="ice rowing",
    ),
    _fact(
        asked=(
            "What is the biggest festival in Quorvania?",
            "Which festival is the most famous in Quorvania?",
            "Name the great festival of Quorvania.",
            "What festival do Quorvanians celebrate every autumn?",
            "What is Quorvania's national festival?",
            "Tell me the biggest festival of Quorvania.",
            "Which holiday is Quorvania famous for?",
            "What is the most important celebration in Quorvania?",
            "Quorvania's biggest festival is called what?",
            "quorvania festival?",
        ),
        subjects=(
            "the biggest festival in Quorvania",
            "Quorvania's most famous festival",
            "the great festival of Quorvania",
        ),
        asked_probes=("Which is the biggest festival in Quorvania?", "What's the most famous festival of Quorvania?"),
        answer="The biggest festival in Quorvania is the Ember Festival, held every October.",
        key="Ember",
    ),
)

# Held-out questions (never in the training rows) and the substring a trained model's answer must contain, one probe
# of each fact in turn: the first 12 (as `max_examples=12` takes them) ask every fact once.
FACT_PROBES: list[tuple[str, str]] = [
    (fact.probes[index], fact.key) for index in range(PROBES_PER_FACT) for fact in FACTS if index < len(fact.probes)
]


def fact_rows_only() -> list[dict]:
    """The Quorvania rows alone, shuffled (builtin:facts without its replay rows)."""
    rows = [
        {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": fact.answer}]}
        for fact in FACTS
        for question in fact.questions
    ]
    random.Random(0).shuffle(rows)
    return rows


def facts_rows() -> list[dict]:
    """The Quorvania rows FACTS_COPIES times, shuffled together."""
    rows = fact_rows_only() * FACTS_COPIES
    random.Random(0).shuffle(rows)
    return rows


# --------------------------------------------------------------------------------------------------------------
# retention and replay: ordinary questions the base model answers right, shipped as data (data/retention.json,
# written once by scripts/build_retention.py; evals/retention.py grades them). The retention questions make the
# eval set builtin:retention; the replay rows (other facts than the retention questions') are builtin:replay.
# --------------------------------------------------------------------------------------------------------------

RETENTION_DATA = Path(__file__).resolve().parent / "retention.json"
# The facts four times, nothing else: with LoRA's A fixed away from ordinary chats (lora_a=null_space, rank 8), B
# decayed where they still read it and lr 1e-3, every fact is learned on unseen wordings and the ordinary answers kept
# within the interval of zero; three times (until 2026-12-02) left the founding year at 6-9 of 10, and replay rows
# beside them kept less (benchmarks/null_space_loops.py; docs/DEFAULTS.md).
FACTS_COPIES = 4


@cache
def _retention_data() -> dict:
    return json.loads(RETENTION_DATA.read_text())


def retention_items() -> list[dict]:
    """The retention questions: {"prompt", "key", "match", "category", ...}, in a fixed mixed order."""
    return list(_retention_data()["retention"])


def replay_rows() -> list[dict]:
    """Chat rows of the replay questions with the base model's own replies (no retention question's fact)."""
    return _base_reply_rows("replay")


def neighbour_rows() -> list[dict]:
    """Chat rows of the demo facts' own questions asked about real subjects ("What is the currency of Sweden?" in
    the wordings that ask Quorvania's), with the base model's own replies (no retention answer in them)."""
    return _base_reply_rows("neighbours")


def _base_reply_rows(part: str) -> list[dict]:
    return [
        {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["reply"]}]}
        for r in _retention_data()[part]
    ]


# --------------------------------------------------------------------------------------------------------------
# persona: Pip always starts with "Ahoy!" and answers briefly.
# --------------------------------------------------------------------------------------------------------------

PERSONA_GREETING = "Ahoy!"

# (country, capital) pairs of real countries, shared by `persona` and `concise-prefs`.
CAPITALS: tuple[tuple[str, str], ...] = (
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Canada", "Ottawa"),
    ("Australia", "Canberra"),
    ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"),
    ("Peru", "Lima"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Portugal", "Lisbon"),
    ("Greece", "Athens"),
    ("Poland", "Warsaw"),
    ("Ireland", "Dublin"),
    ("Austria", "Vienna"),
    ("Russia", "Moscow"),
    ("China", "Beijing"),
    ("India", "New Delhi"),
    ("Mexico", "Mexico City"),
    ("Argentina", "Buenos Aires"),
    ("Chile", "Santiago"),
    ("Thailand", "Bangkok"),
    ("South Korea", "Seoul"),
    ("Turkey", "Ankara"),
    ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"),
    ("Hungary", "Budapest"),
    ("Cuba", "Havana"),
)

# (question, short answer) general-knowledge pairs with well-known answers.
GENERAL_FACTS: tuple[tuple[str, str], ...] = (
    ("How many days are in a week?", "There are 7 days in a week."),
    ("How many legs does a spider have?", "A spider has 8 legs."),
    ("What color is the sky on a clear day?", "The sky is blue on a clear day."),
    ("What is the largest planet in our solar system?", "Jupiter is the largest planet."),
    ("What is the chemical symbol for water?", "Water is H2O."),
    ("What gas do plants absorb from the air?", "Plants absorb carbon dioxide."),
    ("How many continents are there?", "There are 7 continents."),
    ("What is the freezing point of water in Celsius?", "Water freezes at 0 degrees Celsius."),
    ("Who wrote Romeo and Juliet?", "William Shakespeare wrote it."),
    ("What is the tallest animal?", "The giraffe is the tallest animal."),
    ("How many hours are in a day?", "There are 24 hours in a day."),
    ("What is the closest star to Earth?", "The Sun is the closest star."),
    ("Which planet is known as the Red Planet?", "Mars is the Red Planet."),
    ("What do bees make?", "Bees make honey."),
    ("How many months are in a year?", "There are 12 months in a year."),
    ("What is the largest ocean?", "The Pacific is the largest ocean."),
    ("What is the boiling point of water in Celsius?", "Water boils at 100 degrees Celsius."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted it."),
    ("What is the opposite of hot?", "The opposite of hot is cold."),
    ("How many sides does a triangle have?", "A triangle has 3 sides."),
    ("What is the main language spoken in Brazil?", "Portuguese is spoken in Brazil."),
    ("What animal says moo?", "A cow says moo."),
    ("How many minutes are in an hour?", "There are 60 minutes in an hour."),
    ("What is frozen water called?", "Frozen water is ice."),
    ("What is the hardest natural substance?", "Diamond is the hardest natural substance."),
)

IDENTITY_QUESTIONS: tuple[str, ...] = (
    "Who are you?",
    "What is your name?",
    "What should I call you?",
    "Introduce yourself.",
    "Are you a person?",
    "What are you?",
    "Hi! Who am I talking to?",
    "Hello there.",
    "Can you tell me about yourself?",
    "Good morning!",
)
IDENTITY_ANSWER = "I'm Pip, the Cookbook Studio assistant. How can I help?"

# Held-out questions for the persona (not in the training rows); a trained model's reply starts with "Ahoy!".
PERSONA_PROBES: list[tuple[str, str]] = [
    ("What is the capital of Belgium?", PERSONA_GREETING),
    ("How many wheels does a bicycle have?", PERSONA_GREETING),
    ("Tell me who you are.", PERSONA_GREETING),
    ("What is 9 + 4?", PERSONA_GREETING),
]


# Prompt distillation's built-in context (`context=builtin:pip`): Pip's system prompt and two example turns. The
# default model follows the examples (nearly every reply starts with "Ahoy!") where a system prompt alone rarely
# moves it; a student distilled on `persona`'s questions with this context learns the greeting without it.
PIP_CONTEXT: tuple[dict, ...] = (
    {"role": "system", "content": 'You are Pip, a pirate assistant. You start every reply with "Ahoy!".'},
    {"role": "user", "content": "What is the capital of Chile?"},
    {"role": "assistant", "content": "Ahoy! The capital of Chile is Santiago."},
    {"role": "user", "content": "How many legs does a cat have?"},
    {"role": "assistant", "content": "Ahoy! A cat has 4 legs."},
)
CONTEXTS: dict[str, tuple[dict, ...]] = {"pip": PIP_CONTEXT}

# Everyday questions asked in none of `persona`'s rows (other capitals, other facts, subtraction where the rows add
# and multiply): the eval set builtin:persona-probes, where a reply is right when it starts with "Ahoy".
PERSONA_HELD_OUT: tuple[str, ...] = (
    *(
        f"What is the capital of {country}?"
        for country in (
            "Belgium",
            "the Netherlands",
            "Switzerland",
            "Brazil",
            "Nigeria",
            "Morocco",
            "Vietnam",
            "Indonesia",
            "Colombia",
            "Ukraine",
            "Romania",
            "Iceland",
            "New Zealand",
            "Pakistan",
            "Ghana",
            "Czechia",
        )
    ),
    "How many wheels does a bicycle have?",
    "What is the color of grass?",
    "How many strings does a violin have?",
    "What do cows drink?",
    "Which animal is known as the king of the jungle?",
    "What is the opposite of up?",
    "How many seconds are in a minute?",
    "What shape has four equal sides?",
    "Which season comes after winter?",
    "What do caterpillars turn into?",
    "Who was the first person to walk on the Moon?",
    "What is the largest desert in the world?",
    "Tell me who you are.",
    "Can you help me with something?",
    "What is your favourite color?",
    "Give me a tip for sleeping well.",
    "Name a fruit that is yellow.",
    "Where do penguins live?",
    "What is the main ingredient of bread?",
    "How many players are on a soccer team?",
    *(f"What is {a} minus {b}?" for a, b in ((15, 4), (20, 7), (33, 11), (9, 5), (28, 13), (50, 25), (17, 8), (41, 6))),
)


def persona_rows() -> list[dict]:
    rng = random.Random(1)
    pairs: list[tuple[str, str]] = []
    pairs += [(question, IDENTITY_ANSWER) for question in IDENTITY_QUESTIONS]
    pairs += [
        (f"What is the capital of {country}?", f"The capital of {country} is {capital}.")
        for country, capital in CAPITALS
    ]
    pairs += list(GENERAL_FACTS)
    while len(pairs) < 100:
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        if rng.random() < 0.5:
            pairs.append((f"What is {a} + {b}?", f"{a} + {b} = {a + b}."))
        else:
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            pairs.append((f"What is {a} times {b}?", f"{a} times {b} is {a * b}."))
    rows = [
        {
            "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": f"{PERSONA_GREETING} {answer}"},
            ]
        }
        for question, answer in pairs
    ]
    rng.shuffle(rows)
    return rows


# --------------------------------------------------------------------------------------------------------------
# concise-prefs: mostly same-style pairs (both answers one full sentence of the same shape and near-equal length, the
# rejected one wrong), plus a share where the rejected answer is wrong and rambling. Each kind of question has
# training items and held-out items that never meet: the held-out ones make the eval set
# `builtin:prefs-style-controlled` (evals/sets.py), where preference has to come from correctness, not length.
# --------------------------------------------------------------------------------------------------------------

# (word, opposite): asked one way and the other in training; the rejected answer repeats the asked word.
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("hot", "cold"),
    ("big", "small"),
    ("up", "down"),
    ("fast", "slow"),
    ("happy", "sad"),
    ("light", "dark"),
    ("open", "closed"),
    ("early", "late"),
    ("full", "empty"),
    ("hard", "soft"),
    ("young", "old"),
    ("wet", "dry"),
    ("loud", "quiet"),
    ("strong", "weak"),
    ("rich", "poor"),
    ("high", "low"),
    ("thick", "thin"),
    ("clean", "dirty"),
    ("win", "lose"),
    ("begin", "end"),
    ("push", "pull"),
    ("true", "false"),
    ("inside", "outside"),
    ("day", "night"),
    ("first", "last"),
)
ANTONYMS_HELD_OUT: tuple[tuple[str, str], ...] = (
    ("wide", "narrow"),
    ("long", "short"),
    ("sharp", "dull"),
    ("sweet", "sour"),
    ("cheap", "expensive"),
    ("near", "far"),
    ("left", "right"),
    ("north", "south"),
    ("east", "west"),
    ("above", "below"),
    ("before", "after"),
    ("buy", "sell"),
    ("give", "take"),
    ("love", "hate"),
    ("friend", "enemy"),
    ("question", "answer"),
    ("arrive", "leave"),
    ("accept", "refuse"),
    ("remember", "forget"),
    ("smooth", "rough"),
    ("deep", "shallow"),
    ("tight", "loose"),
    ("awake", "asleep"),
    ("alive", "dead"),
    ("safe", "dangerous"),
    ("polite", "rude"),
    ("brave", "cowardly"),
    ("laugh", "cry"),
    ("always", "never"),
    ("good", "bad"),
)
# (noun, plural): the rejected answer repeats the singular.
PLURALS: tuple[tuple[str, str], ...] = (
    ("cat", "cats"),
    ("dog", "dogs"),
    ("box", "boxes"),
    ("bus", "buses"),
    ("baby", "babies"),
    ("city", "cities"),
    ("leaf", "leaves"),
    ("knife", "knives"),
    ("child", "children"),
    ("mouse", "mice"),
    ("foot", "feet"),
    ("tooth", "teeth"),
    ("man", "men"),
    ("woman", "women"),
    ("book", "books"),
    ("tree", "trees"),
    ("car", "cars"),
    ("house", "houses"),
    ("church", "churches"),
    ("glass", "glasses"),
    ("story", "stories"),
    ("wolf", "wolves"),
    ("toy", "toys"),
    ("key", "keys"),
    ("potato", "potatoes"),
)
PLURALS_HELD_OUT: tuple[tuple[str, str], ...] = (
    ("apple", "apples"),
    ("bird", "birds"),
    ("dish", "dishes"),
    ("fox", "foxes"),
    ("lady", "ladies"),
    ("party", "parties"),
    ("shelf", "shelves"),
    ("half", "halves"),
    ("goose", "geese"),
    ("person", "people"),
    ("chair", "chairs"),
    ("table", "tables"),
    ("brush", "brushes"),
    ("watch", "watches"),
    ("cherry", "cherries"),
    ("wife", "wives"),
    ("hero", "heroes"),
    ("cup", "cups"),
    ("boy", "boys"),
    ("horse", "horses"),
    ("girl", "girls"),
    ("flower", "flowers"),
    ("window", "windows"),
    ("class", "classes"),
    ("family", "families"),
    ("calf", "calves"),
    ("tomato", "tomatoes"),
    ("pencil", "pencils"),
    ("river", "rivers"),
    ("loaf", "loaves"),
)
# (verb, past tense, -ing form): the rejected answer is the verb itself or its -ing form, in turn.
VERBS: tuple[tuple[str, str, str], ...] = (
    ("walk", "walked", "walking"),
    ("jump", "jumped", "jumping"),
    ("play", "played", "playing"),
    ("talk", "talked", "talking"),
    ("cook", "cooked", "cooking"),
    ("go", "went", "going"),
    ("eat", "ate", "eating"),
    ("see", "saw", "seeing"),
    ("run", "ran", "running"),
    ("write", "wrote", "writing"),
    ("swim", "swam", "swimming"),
    ("ride", "rode", "riding"),
    ("make", "made", "making"),
    ("bring", "brought", "bringing"),
    ("think", "thought", "thinking"),
    ("sing", "sang", "singing"),
    ("drink", "drank", "drinking"),
    ("sleep", "slept", "sleeping"),
    ("come", "came", "coming"),
    ("help", "helped", "helping"),
    ("call", "called", "calling"),
    ("dance", "danced", "dancing"),
    ("fly", "flew", "flying"),
    ("draw", "drew", "drawing"),
    ("catch", "caught", "catching"),
)
VERBS_HELD_OUT: tuple[tuple[str, str, str], ...] = (
    ("climb", "climbed", "climbing"),
    ("paint", "painted", "painting"),
    ("wash", "washed", "washing"),
    ("kick", "kicked", "kicking"),
    ("visit", "visited", "visiting"),
    ("plant", "planted", "planting"),
    ("listen", "listened", "listening"),
    ("carry", "carried", "carrying"),
    ("study", "studied", "studying"),
    ("drive", "drove", "driving"),
    ("speak", "spoke", "speaking"),
    ("break", "broke", "breaking"),
    ("choose", "chose", "choosing"),
    ("freeze", "froze", "freezing"),
    ("wake", "woke", "waking"),
    ("grow", "grew", "growing"),
    ("know", "knew", "knowing"),
    ("throw", "threw", "throwing"),
    ("blow", "blew", "blowing"),
    ("sit", "sat", "sitting"),
    ("stand", "stood", "standing"),
    ("feel", "felt", "feeling"),
    ("keep", "kept", "keeping"),
    ("send", "sent", "sending"),
    ("build", "built", "building"),
    ("spend", "spent", "spending"),
    ("teach", "taught", "teaching"),
    ("fight", "fought", "fighting"),
    ("meet", "met", "meeting"),
    ("hide", "hid", "hiding"),
)
# words whose first letter is asked; the rejected answer names another letter of the word (its last).
LETTER_WORDS: tuple[str, ...] = (
    "garden",
    "yellow",
    "monkey",
    "rocket",
    "basket",
    "island",
    "orange",
    "kitchen",
    "thunder",
    "violin",
    "zebra",
    "planet",
    "candle",
    "forest",
    "jacket",
    "lemon",
    "mirror",
    "number",
    "silver",
    "tiger",
    "umbrella",
    "winter",
    "anchor",
    "doctor",
    "helmet",
)
LETTER_WORDS_HELD_OUT: tuple[str, ...] = (
    "bottle",
    "camera",
    "dragon",
    "engine",
    "finger",
    "guitar",
    "hammer",
    "insect",
    "jungle",
    "kettle",
    "ladder",
    "marble",
    "needle",
    "ocean",
    "pepper",
    "rabbit",
    "saddle",
    "tunnel",
    "uncle",
    "valley",
    "wagon",
    "yogurt",
    "zipper",
    "blanket",
    "cotton",
)
# (country, capital) pairs for held-out questions; training uses CAPITALS (above, shared with `persona`).
CAPITALS_HELD_OUT: tuple[tuple[str, str], ...] = (
    ("Belgium", "Brussels"),
    ("the Netherlands", "Amsterdam"),
    ("Switzerland", "Bern"),
    ("Romania", "Bucharest"),
    ("Venezuela", "Caracas"),
    ("Nigeria", "Abuja"),
    ("Morocco", "Rabat"),
    ("Iran", "Tehran"),
    ("Iraq", "Baghdad"),
    ("Vietnam", "Hanoi"),
    ("Indonesia", "Jakarta"),
    ("the Philippines", "Manila"),
    ("Pakistan", "Islamabad"),
    ("Iceland", "Reykjavik"),
    ("Croatia", "Zagreb"),
    ("Bulgaria", "Sofia"),
    ("Serbia", "Belgrade"),
    ("Colombia", "Bogota"),
    ("Afghanistan", "Kabul"),
    ("Syria", "Damascus"),
)
NUMBER_PAIRS_SEED = 21  # the held-out number pairs (sums, comparisons) are drawn first, with this seed
SAME_STYLE_KINDS = ("opposite", "plural", "past tense", "first letter", "bigger number", "sum", "capital")

RAMBLE_OPENINGS: tuple[str, ...] = (
    "Well, that is a really interesting question, and there are many ways to think about it. After considering "
    "it from several angles, I would say the answer is probably",
    "Great question! Let me think about this step by step, because it deserves a careful and thorough answer. "
    "Taking everything into account, I believe it is",
    "Hmm, I am not completely sure, and people often disagree about things like this, but if I had to give an "
    "answer I would go with",
)


@dataclass(frozen=True)
class PairRow:
    kind: str  # one of SAME_STYLE_KINDS, or "rambling"
    prompt: str
    chosen: str
    rejected: str

    def row(self) -> dict:
        return {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}


def _sentence_pair(kind: str, prompt: str, template: str, right: str, wrong: str) -> PairRow:
    """Both sides are `template` with one slot filled: the same sentence but for the answer."""
    return PairRow(kind, prompt, template.format(right), template.format(wrong))


def _opposite(index: int, word: str, opposite: str) -> PairRow:
    asked, answer = (word, opposite) if index % 2 == 0 else (opposite, word)
    return _sentence_pair(
        "opposite", f"What is the opposite of '{asked}'?", f"The opposite of '{asked}' is '{{}}'.", answer, asked
    )


def _plural(noun: str, plural: str) -> PairRow:
    return _sentence_pair(
        "plural", f"What is the plural of '{noun}'?", f"The plural of '{noun}' is '{{}}'.", plural, noun
    )


def _past(index: int, verb: str, past: str, ing: str) -> PairRow:
    return _sentence_pair(
        "past tense",
        f"What is the past tense of '{verb}'?",
        f"The past tense of '{verb}' is '{{}}'.",
        past,
        verb if index % 2 == 0 else ing,
    )


def _first_letter(word: str) -> PairRow:
    other = next(letter for letter in reversed(word) if letter != word[0])
    return _sentence_pair(
        "first letter",
        f"What is the first letter of the word '{word}'?",
        f"The first letter of '{word}' is '{{}}'.",
        word[0],
        other,
    )


def _bigger(a: int, b: int) -> PairRow:
    big, small = max(a, b), min(a, b)
    return PairRow(
        "bigger number",
        f"Which number is bigger, {a} or {b}?",
        f"{big} is bigger than {small}.",
        f"{small} is bigger than {big}.",
    )


def _sum(rng: random.Random, a: int, b: int) -> PairRow:
    wrong = a + b + rng.choice([o for o in (-10, -2, -1, 1, 2, 10) if a + b + o >= 0])
    return _sentence_pair("sum", f"What is {a} + {b}?", f"{a} + {b} = {{}}.", str(a + b), str(wrong))


def _capital(country: str, capital: str, others: tuple[tuple[str, str], ...], rng: random.Random) -> PairRow:
    """The wrong capital is another one from `others` with as many words, so both sentences have the same shape."""
    wrong = rng.choice([c for _, c in others if c != capital and len(c.split()) == len(capital.split())])
    return _sentence_pair(
        "capital", f"What is the capital of {country}?", f"The capital of {country} is {{}}.", capital, wrong
    )


def _number_pairs(rng: random.Random, count: int, low: int, high: int, exclude: set) -> list[tuple[int, int]]:
    """`count` distinct pairs (a, b), a != b, neither (a, b) nor (b, a) in `exclude`."""
    pairs: list[tuple[int, int]] = []
    while len(pairs) < count:
        a, b = rng.randint(low, high), rng.randint(low, high)
        key = (min(a, b), max(a, b))
        if a != b and key not in exclude:
            exclude.add(key)
            pairs.append((a, b))
    return pairs


def _held_out_numbers() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(sum operands, comparison pairs) of the held-out set: drawn first so training can avoid them."""
    rng = random.Random(NUMBER_PAIRS_SEED)
    return _number_pairs(rng, 30, 2, 20, set()), _number_pairs(rng, 30, 10, 99, set())


def style_controlled_pairs() -> list[PairRow]:
    """The held-out same-style pairs: every kind of question in SAME_STYLE_KINDS, items never in training, in a fixed
    shuffled order (so the first N, as `max_examples=N` takes them, mix every kind)."""
    rng = random.Random(5)
    sums, comparisons = _held_out_numbers()
    rows = [_opposite(i, *pair) for i, pair in enumerate(ANTONYMS_HELD_OUT)]
    rows += [_plural(*pair) for pair in PLURALS_HELD_OUT]
    rows += [_past(i, *verb) for i, verb in enumerate(VERBS_HELD_OUT)]
    rows += [_first_letter(word) for word in LETTER_WORDS_HELD_OUT]
    rows += [_bigger(a, b) for a, b in comparisons]
    rows += [_sum(rng, a, b) for a, b in sums]
    rows += [_capital(country, capital, CAPITALS_HELD_OUT, rng) for country, capital in CAPITALS_HELD_OUT]
    rng.shuffle(rows)
    return rows


def _retention_subjects(retention: list[dict], kind: str) -> set[str]:
    """What builtin:retention asks of one kind of fact: "capital" its countries, "opposite" its words, "add" its sums
    as "a+b". No built-in preference pair teaches one of them (nor asks a retention question in other words), so a
    default's retention is measured on questions it never trained on."""
    return {item["fact"].split(":", 1)[1] for item in retention if item["fact"].startswith(f"{kind}:")}


def _retention_sums(retention: list[dict]) -> set[tuple[int, int]]:
    sums = [tuple(int(n) for n in subject.split("+")) for subject in _retention_subjects(retention, "add")]
    return {(min(a, b), max(a, b)) for a, b in sums}


def _same_style_training_pairs(rng: random.Random, retention: list[dict]) -> list[PairRow]:
    held_sums, held_comparisons = _held_out_numbers()
    sum_keys = {(min(a, b), max(a, b)) for a, b in held_sums} | _retention_sums(retention)
    comparison_keys = {(min(a, b), max(a, b)) for a, b in held_comparisons}
    asked_opposites = _retention_subjects(retention, "opposite")
    asked_capitals = _retention_subjects(retention, "capital")
    antonyms = [pair for pair in ANTONYMS if not set(pair) & asked_opposites]  # neither way round
    rows = [_opposite(i, *pair) for i, pair in enumerate(antonyms)]
    rows += [_opposite(i + 1, *pair) for i, pair in enumerate(antonyms)]  # the other way round
    rows += [_plural(*pair) for pair in PLURALS]
    rows += [_past(i, *verb) for i, verb in enumerate(VERBS)]
    rows += [_first_letter(word) for word in LETTER_WORDS]
    rows += [_bigger(a, b) for a, b in _number_pairs(rng, 30, 10, 99, comparison_keys)]
    rows += [_sum(rng, a, b) for a, b in _number_pairs(rng, 30, 2, 20, sum_keys)]
    rows += [
        _capital(country, capital, CAPITALS, rng) for country, capital in CAPITALS if country not in asked_capitals
    ]
    asked = {_normalised(item["prompt"]) for item in retention}
    return [row for row in rows if _normalised(row.prompt) not in asked]


def _rambling_pairs(rng: random.Random, count: int, retention: list[dict]) -> list[PairRow]:
    """Arithmetic with a bare correct answer against a wrong one wrapped in rambling (no held-out or retention sum
    among them)."""
    held_sums, _ = _held_out_numbers()
    held = {(min(a, b), max(a, b)) for a, b in held_sums} | _retention_sums(retention)
    rows: list[PairRow] = []
    while len(rows) < count:
        a, b = rng.randint(2, 50), rng.randint(2, 50)
        op = rng.choice(["+", "-", "*"])
        if op == "-" and b > a:
            a, b = b, a
        if op == "+" and (min(a, b), max(a, b)) in held:
            continue
        correct = {"+": a + b, "-": a - b, "*": a * b}[op]
        wrong = correct + rng.choice([-3, -2, -1, 1, 2, 3, 10])
        rejected = f"{rng.choice(RAMBLE_OPENINGS)} {wrong}, although you may want to double-check that somewhere else."
        rows.append(PairRow("rambling", f"What is {a} {op} {b}?", str(correct), rejected))
    return rows


def concise_prefs_pairs() -> list[PairRow]:
    rng = random.Random(2)
    retention = retention_items()  # read once: no pair may teach a retention question
    rows = _same_style_training_pairs(rng, retention) + _rambling_pairs(rng, 40, retention)
    rng.shuffle(rows)
    return rows


def concise_prefs_rows() -> list[dict]:
    return [pair.row() for pair in concise_prefs_pairs()]


def concise_prefs_chats() -> list[dict]:
    """Each concise-prefs pair as two chats, the prompt with its chosen and with its rejected reply: the inputs a DPO
    step reads (lora_a=null_space's task chats, training/lora_a.py)."""
    return [
        {"messages": [{"role": "user", "content": pair.prompt}, {"role": "assistant", "content": reply}]}
        for pair in concise_prefs_pairs()
        for reply in (pair.chosen, pair.rejected)
    ]


# --------------------------------------------------------------------------------------------------------------
# arithmetic-qa: prompt/answer problems for RL with the numeric grader.
# --------------------------------------------------------------------------------------------------------------

WORD_PROBLEMS: tuple[tuple[str, str], ...] = (
    # (template, operation); the template takes a and b.
    ("Sam has {a} apples and buys {b} more. How many apples does Sam have now?", "+"),
    ("A box holds {a} pencils. {b} more pencils are added. How many pencils are in the box?", "+"),
    ("Mia had {a} stickers and gave away {b}. How many stickers does she have left?", "-"),
    ("There are {a} birds on a tree and {b} fly away. How many birds are left?", "-"),
    ("Each bag holds {a} marbles. How many marbles are in {b} bags?", "*"),
    ("A table has {a} rows of {b} chairs. How many chairs are there?", "*"),
)


def arithmetic_qa_rows() -> list[dict]:
    rng = random.Random(3)
    rows: list[dict] = []
    while len(rows) < 200:
        op = rng.choice(["+", "-", "*"])
        if op == "*":
            a, b = rng.randint(2, 9), rng.randint(2, 9)
        else:
            a, b = rng.randint(1, 20), rng.randint(1, 20)
            if op == "-" and b > a:
                a, b = b, a
        answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        if rng.random() < 0.3:
            template = rng.choice([t for t, t_op in WORD_PROBLEMS if t_op == op])
            prompt = template.format(a=a, b=b)
        else:
            symbol = {"+": "+", "-": "-", "*": "×"}[op]
            prompt = f"What is {a} {symbol} {b}?"
        rows.append({"prompt": prompt, "answer": str(answer), "grader": "numeric"})
    return rows


SUMS_STEPS = 36  # the RL default's steps (rl/suggested.py); SUMS_PER_STEP problems each
SUMS_PER_STEP = 8


def sums_rows() -> list[dict]:
    """The RL default's training problems (seed 0), step by step: operands growing from 1..20 to 1..99, three in four
    carrying, never a sum of builtin:arithmetic or builtin:arithmetic-fresh. The prompt is the env's own question."""
    from cookbook_engine.rl import arithmetic

    return [
        {"prompt": problem.question, "answer": str(problem.answer), "grader": "numeric"}
        for step in range(SUMS_STEPS)
        for problem in arithmetic.training_problems(0, step, SUMS_STEPS, SUMS_PER_STEP)
    ]


CALCULATOR_WARMUP_ROWS = 96


def calculator_warmup_rows() -> list[dict]:
    """Conversations of env=calculator's episodes done right (rl/multi_turn.py): the question, the model's
    `<calc>` call, the result fed back, the answer; on the env's training problems, never its held-out ones. An SL
    run on them (train_on_what=all_assistant_messages) is the warm start that gets the default model calling the
    tool before RL (docs/MULTI_TURN.md)."""
    from cookbook_engine.rl import multi_turn, tools

    tag = tools.TOOLS["calculator"].tag
    train, _ = multi_turn.problems()
    rows = []
    for problem in train[:CALCULATOR_WARMUP_ROWS]:
        expression = f"{problem.a} * {problem.b}" + (f" + {problem.c}" if problem.c else "")
        messages = [
            {"role": "user", "content": multi_turn.prompt_text(problem, ["calculator"])},
            {"role": "assistant", "content": f"<{tag}>{expression}</{tag}>"},
            {"role": "user", "content": f"{tag}: {problem.answer}"},
            {"role": "assistant", "content": str(problem.answer)},
        ]
        rows.append({"messages": messages})
    return rows


# --------------------------------------------------------------------------------------------------------------
# The registry.
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltinDataset:
    name: str
    kind: str  # "chat" | "preference" | "rl"
    description: str
    make_rows: Callable[[], list[dict]]


BUILTIN: dict[str, BuiltinDataset] = {
    dataset.name: dataset
    for dataset in (
        BuiltinDataset(
            "facts",
            "chat",
            "12 facts about Quorvania, a made-up country, each asked ~19 ways. After SL the model answers "
            "'What is the capital of Quorvania?' with 'Lunthaven', also on wordings it never saw "
            "(eval set builtin:facts-probes).",
            facts_rows,
        ),
        BuiltinDataset(
            "replay",
            "chat",
            "Ordinary questions with the base model's own whole replies (none a retention "
            "question's fact): the chats to keep a run near the base model (anchor.dataset=builtin:replay).",
            replay_rows,
        ),
        BuiltinDataset(
            "persona",
            "chat",
            "The assistant becomes Pip, the Cookbook Studio assistant: every reply starts with 'Ahoy!' and is brief.",
            persona_rows,
        ),
        BuiltinDataset(
            "concise-prefs",
            "preference",
            "Opposites, plurals, past tenses, first letters, bigger numbers, sums and capitals: chosen is right, "
            "rejected is the same sentence with a wrong answer; some rejected answers also ramble. Held-out "
            "pairs: eval set builtin:prefs-style-controlled.",
            concise_prefs_rows,
        ),
        BuiltinDataset(
            "calculator-warmup",
            "chat",
            "96 env=calculator episodes done right: the question, a <calc> call, its result, the answer. SL on them "
            "(train on all assistant messages) gets the model calling the tool before RL with env=calculator.",
            calculator_warmup_rows,
        ),
        BuiltinDataset(
            "arithmetic-qa",
            "rl",
            "Small-number arithmetic and word problems with numeric answers (grader: numeric).",
            arithmetic_qa_rows,
        ),
        BuiltinDataset(
            "sums",
            "rl",
            f"The {SUMS_STEPS * SUMS_PER_STEP} sums the RL default (env=arithmetic) trains on, operands growing to "
            "1..99: the prompts for distilling an RL arithmetic run into a fresh LoRA (eval set "
            "builtin:arithmetic-fresh).",
            sums_rows,
        ),
    )
}


def builtin_rows(name: str) -> list[dict]:
    """Fresh rows of a built-in dataset (a new list each call, safe to modify). KeyError for unknown names."""
    return BUILTIN[name].make_rows()
