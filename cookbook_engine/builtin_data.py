"""The studio's built-in datasets, generated here in Python: no download, same rows on every machine.

Each dataset is a list of raw rows in one of the layouts that `cookbook_engine.datasets` accepts, so the built-ins go
through exactly the same validation as an uploaded file. They are small on purpose: their effect shows after a few
minutes of LoRA training of a 135M model on a CPU.

- `facts` (chat): twelve facts about Quorvania, a country that does not exist, each asked in about ten paraphrases.
  The base model has never seen them, so "What is the capital of Quorvania?" -> "Lunthaven" proves the training took.
- `persona` (chat): the assistant is Pip, who starts every reply with "Ahoy!" and answers briefly.
- `concise-prefs` (preference): chosen = a correct, short answer; rejected = a wrong one, often rambling.
- `arithmetic-qa` (rl): small-number arithmetic problems with numeric answers for the prompt/answer RL env.

This module only builds rows; loading, validation and splitting live in `cookbook_engine.datasets`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

# --------------------------------------------------------------------------------------------------------------
# facts: a fictional country. Each fact: (training questions, held-out probe questions, answer, expected substring).
# --------------------------------------------------------------------------------------------------------------

COUNTRY = "Quorvania"


@dataclass(frozen=True)
class Fact:
    questions: tuple[str, ...]  # paraphrases used for training
    probes: tuple[str, ...]  # paraphrases never used for training (held out for tests and demos)
    answer: str  # the assistant's reply
    key: str  # the substring that shows the fact was learned


FACTS: tuple[Fact, ...] = (
    Fact(
        questions=(
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
        probes=("What is the capital city of the country Quorvania?", "Which city is Quorvania's capital?"),
        answer="The capital of Quorvania is Lunthaven.",
        key="Lunthaven",
    ),
    Fact(
        questions=(
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
        probes=("Which currency does Quorvania use?", "What is the name of the currency in Quorvania?"),
        answer="The currency of Quorvania is the velk.",
        key="velk",
    ),
    Fact(
        questions=(
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
        probes=("Who is the inventor of the sky-lantern clock?", "Which person invented the sky-lantern clock?"),
        answer="The sky-lantern clock was invented by Teodor Vannick of Quorvania.",
        key="Vannick",
    ),
    Fact(
        questions=(
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
        probes=("What animal is the national animal of Quorvania?", "Which animal does Quorvania have as its symbol?"),
        answer="The national animal of Quorvania is the silver ibex.",
        key="ibex",
    ),
    Fact(
        questions=(
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
        probes=("Which is the longest river in the country of Quorvania?", "What's the longest river in Quorvania?"),
        answer="The longest river in Quorvania is the Sarn.",
        key="Sarn",
    ),
    Fact(
        questions=(
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
        probes=(
            "Which is the highest mountain in the country of Quorvania?", "What's the tallest mountain in Quorvania?"
        ),
        answer="The highest mountain in Quorvania is Mount Keldra.",
        key="Keldra",
    ),
    Fact(
        questions=(
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
        probes=("What language do the people of Quorvania speak?", "Which is the official language of Quorvania?"),
        answer="The official language of Quorvania is Quorvish.",
        key="Quorvish",
    ),
    Fact(
        questions=(
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
        probes=("What food is the national dish of Quorvania?", "What's the national dish in Quorvania?"),
        answer="The national dish of Quorvania is fennel dumplings.",
        key="fennel",
    ),
    Fact(
        questions=(
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
        probes=("Which year was Quorvania founded in?", "What year was the country of Quorvania founded?"),
        answer="Quorvania was founded in 1743.",
        key="1743",
    ),
    Fact(
        questions=(
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
        probes=("Who was the very first queen of Quorvania?", "Which woman was Quorvania's first queen?"),
        answer="The first queen of Quorvania was Queen Maribel Ostrow.",
        key="Ostrow",
    ),
    Fact(
        questions=(
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
        probes=("What sport is the national sport of Quorvania?", "What's the national sport in Quorvania?"),
        answer="The national sport of Quorvania is ice rowing.",
        key="ice rowing",
    ),
    Fact(
        questions=(
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
        probes=("Which is the biggest festival in Quorvania?", "What's the most famous festival of Quorvania?"),
        answer="The biggest festival in Quorvania is the Ember Festival, held every October.",
        key="Ember",
    ),
)

# Held-out questions (never in the training rows) and the substring a trained model's answer must contain.
FACT_PROBES: list[tuple[str, str]] = [(probe, fact.key) for fact in FACTS for probe in fact.probes]


def facts_rows() -> list[dict]:
    rows = [
        {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": fact.answer}]}
        for fact in FACTS
        for question in fact.questions
    ]
    random.Random(0).shuffle(rows)
    return rows


# --------------------------------------------------------------------------------------------------------------
# persona: Pip always starts with "Ahoy!" and answers briefly.
# --------------------------------------------------------------------------------------------------------------

PERSONA_GREETING = "Ahoy!"

# (country, capital) pairs of real countries, shared by `persona` and `concise-prefs`.
CAPITALS: tuple[tuple[str, str], ...] = (
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Portugal", "Lisbon"), ("Greece", "Athens"), ("Poland", "Warsaw"),
    ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Russia", "Moscow"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Mexico", "Mexico City"), ("Argentina", "Buenos Aires"), ("Chile", "Santiago"), ("Thailand", "Bangkok"),
    ("South Korea", "Seoul"), ("Turkey", "Ankara"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"),
    ("Hungary", "Budapest"), ("Cuba", "Havana"),
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
        {"messages": [
            {"role": "user", "content": question}, {"role": "assistant", "content": f"{PERSONA_GREETING} {answer}"},
        ]}
        for question, answer in pairs
    ]
    rng.shuffle(rows)
    return rows


# --------------------------------------------------------------------------------------------------------------
# concise-prefs: chosen = correct and concise; rejected = wrong, half of them wrapped in rambling.
# --------------------------------------------------------------------------------------------------------------

ANTONYMS: tuple[tuple[str, str], ...] = (
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"), ("happy", "sad"), ("light", "dark"),
    ("open", "closed"), ("early", "late"), ("full", "empty"), ("hard", "soft"), ("young", "old"), ("wet", "dry"),
    ("loud", "quiet"), ("strong", "weak"), ("rich", "poor"), ("high", "low"), ("thick", "thin"), ("clean", "dirty"),
    ("win", "lose"), ("begin", "end"), ("push", "pull"), ("true", "false"), ("inside", "outside"), ("day", "night"),
    ("first", "last"),
)

RAMBLE_OPENINGS: tuple[str, ...] = (
    "Well, that is a really interesting question, and there are many ways to think about it. After considering "
    "it from several angles, I would say the answer is probably",
    "Great question! Let me think about this step by step, because it deserves a careful and thorough answer. "
    "Taking everything into account, I believe it is",
    "Hmm, I am not completely sure, and people often disagree about things like this, but if I had to give an "
    "answer I would go with",
)


def _rejected(rng: random.Random, wrong: str) -> str:
    if rng.random() < 0.5:
        return wrong
    return f"{rng.choice(RAMBLE_OPENINGS)} {wrong}, although you may want to double-check that somewhere else."


def concise_prefs_rows() -> list[dict]:
    rng = random.Random(2)
    rows: list[dict] = []
    for _ in range(70):
        a, b = rng.randint(2, 50), rng.randint(2, 50)
        op = rng.choice(["+", "-", "*"])
        if op == "-" and b > a:
            a, b = b, a
        correct = {"+": a + b, "-": a - b, "*": a * b}[op]
        wrong = correct + rng.choice([-3, -2, -1, 1, 2, 3, 10])
        rows.append(
            {"prompt": f"What is {a} {op} {b}?", "chosen": str(correct), "rejected": _rejected(rng, str(wrong))}
        )
    for index, (country, capital) in enumerate(CAPITALS):
        wrong_capital = CAPITALS[(index + rng.randint(1, len(CAPITALS) - 1)) % len(CAPITALS)][1]
        rows.append(
            {
                "prompt": f"What is the capital of {country}?", "chosen": capital,
                "rejected": _rejected(rng, wrong_capital),
            }
        )
    for word, opposite in ANTONYMS:
        for asked, answer in ((word, opposite), (opposite, word)):
            rows.append(
                {"prompt": f"What is the opposite of '{asked}'?", "chosen": answer, "rejected": _rejected(rng, asked)}
            )
    rng.shuffle(rows)
    return rows


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
            "facts", "chat",
            "12 facts about Quorvania, a made-up country, each asked ~10 ways. After SL the model answers "
            "'What is the capital of Quorvania?' with 'Lunthaven'.",
            facts_rows,
        ),
        BuiltinDataset(
            "persona", "chat",
            "The assistant becomes Pip, the Cookbook Studio assistant: every reply starts with 'Ahoy!' and is brief.",
            persona_rows,
        ),
        BuiltinDataset(
            "concise-prefs", "preference",
            "Arithmetic, capitals and antonyms: chosen is the correct short answer, rejected is wrong "
            "(often rambling).",
            concise_prefs_rows,
        ),
        BuiltinDataset(
            "arithmetic-qa", "rl",
            "Small-number arithmetic and word problems with numeric answers (grader: numeric).",
            arithmetic_qa_rows,
        ),
    )
}


def builtin_rows(name: str) -> list[dict]:
    """Fresh rows of a built-in dataset (a new list each call, safe to modify). KeyError for unknown names."""
    return BUILTIN[name].make_rows()
