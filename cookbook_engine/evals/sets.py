"""Eval sets: what an evaluation runs on, built-in (written by this project, no download) or from a file.

An eval set is named by a spec: `builtin:NAME` for the ones below, or a path to a .jsonl/.json/.csv/.parquet file.
Its kind decides the evaluator (evals/evaluators.py):

- `generation`: prompt + answer + grader (exact, numeric, contains, regex, python_tests from rl/graders.py); each
  reply is generated and graded. With samples > 1 per prompt the set also reports pass@k.
- `classification`: prompt + label over a fixed label set; the label is parsed from the reply.
- `preference`: held-out pairs (prompt, chosen, rejected); scored by log-likelihood, nothing is generated.
- `nll`: chat conversations; the negative log-likelihood of the last assistant message.
- `episodes`: problems of a multi-turn, tool-using env (rl/multi_turn.py); each episode is played greedily turn by
  turn, the tool's results fed back, and its final answer graded as the env grades it.

Built-ins: facts-probes, facts-nll (the Quorvania paraphrases never trained on), persona-probes (does the reply
start with Pip's "Ahoy!"), arithmetic, code and calculator (the RL envs' held-out problems; calculator is
multi-turn), concise-prefs (the DPO dataset's held-out pairs), prefs-style-controlled (held-out pairs whose two
answers differ only in correctness), sentiment (a balanced classification set) and retention (ordinary questions the
base model answers right: does training keep them? evals/retention.py).
Files: rows with `prompt` and `label` are classification (the label set is every label seen, or a row's `labels`
list); other files go through cookbook_engine.data.loading and become nll (chat), preference or generation
(prompt/answer) sets with all rows used.

Not here: running models or computing metrics (evaluators.py, stats.py).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass

from cookbook_engine.data import builtin as builtin_data, loading as datasets
from cookbook_engine.data.loading import DEFAULT_SEED, DEFAULT_TEST_FRACTION
from storage.input_error import InputError

KINDS = ("generation", "classification", "preference", "nll", "episodes")
BUILTIN_PREFIX = "builtin:"


class EvalSetError(InputError, ValueError):
    """An eval set that cannot be loaded; the message names the set and what is wrong."""


@dataclass(frozen=True)
class GenerationExample:
    prompt: str
    answer: str
    grader: str


@dataclass(frozen=True)
class ClassificationExample:
    prompt: str
    label: str


@dataclass(frozen=True)
class EpisodeExample:
    """A multi-turn env's problem: its question and answer, and what the env needs to play it again."""

    prompt: str
    answer: str
    env: str  # the env's name in rl/multi_turn.py (calculator)
    problem: tuple[int, ...]
    tools: tuple[str, ...]
    max_turns: int


@dataclass(frozen=True)
class ChatExample:
    messages: tuple  # of message dicts; the last is the assistant message scored


@dataclass
class EvalSet:
    name: str  # the spec it was loaded from
    kind: str  # one of KINDS
    description: str
    examples: list
    labels: list[str] = field(default_factory=list)  # classification only
    max_tokens: int = 64  # generation and classification: the reply budget

    def fingerprint(self) -> str:
        """A hash of everything that decides the set's results (kind, examples, labels, max_tokens)."""
        payload = json.dumps(
            [self.kind, self.labels, self.max_tokens, [_plain(e) for e in self.examples]], sort_keys=True, default=str
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _plain(example):
    return asdict(example) if is_dataclass(example) and not isinstance(example, type) else example


# ------------------------------------------------------------------------------------------------ built-ins


def _facts_probes() -> EvalSet:
    examples = [GenerationExample(probe, key, "contains") for probe, key in builtin_data.FACT_PROBES]
    return EvalSet(
        "builtin:facts-probes",
        "generation",
        f"{len(examples)} paraphrased questions about Quorvania never used in builtin:facts training; "
        "correct when the reply contains the fact's key word (grader: contains).",
        examples,
        max_tokens=40,
    )


PERSONA_GREETING_PATTERN = r"(?is)ahoy\b.*"  # the reply starts with the greeting (RE2, matched on the whole reply)


def _persona_probes() -> EvalSet:
    examples = [GenerationExample(q, PERSONA_GREETING_PATTERN, "regex") for q in builtin_data.PERSONA_HELD_OUT]
    return EvalSet(
        "builtin:persona-probes",
        "generation",
        f"{len(examples)} everyday questions asked in none of builtin:persona's rows; right when the reply starts "
        f"with '{builtin_data.PERSONA_GREETING}' (Pip's greeting, taught by SL on builtin:persona or by prompt "
        "distillation from context=builtin:pip; grader: regex).",
        examples,
        max_tokens=8,
    )


def _facts_nll() -> EvalSet:
    examples = [
        ChatExample(({"role": "user", "content": probe}, {"role": "assistant", "content": fact.answer}))
        for fact in builtin_data.FACTS
        for probe in fact.probes
    ]
    return EvalSet(
        "builtin:facts-nll",
        "nll",
        f"NLL of the right answer to {len(examples)} held-out Quorvania questions (lower is better).",
        examples,
    )


def _arithmetic() -> EvalSet:
    from cookbook_engine.rl.arithmetic import held_out_problems

    examples = [GenerationExample(p.question, str(p.answer), "numeric") for p in held_out_problems()]
    return EvalSet(
        "builtin:arithmetic",
        "generation",
        f"the arithmetic RL env's {len(examples)} held-out problems, never trained on (additions of two "
        "two-digit numbers; grader: numeric).",
        examples,
        max_tokens=32,
    )


def _fresh_arithmetic(name: str, op: str, low: int, high: int, what: str) -> Callable[[], EvalSet]:
    def build() -> EvalSet:
        from cookbook_engine.rl.arithmetic import fresh_problems

        examples = [GenerationExample(p.question, str(p.answer), "numeric") for p in fresh_problems(op, low, high)]
        return EvalSet(
            f"builtin:{name}",
            "generation",
            f"{len(examples)} {what}, drawn by another seed and procedure than the arithmetic env's held-out set "
            "and its training (every ordered pair listed, a sample taken; none held out; grader: numeric).",
            examples,
            max_tokens=32,
        )

    return build


CALCULATOR_EVAL_TURNS = 3  # the env's default max_turns


def _calculator() -> EvalSet:
    from cookbook_engine.rl import multi_turn

    examples = [
        EpisodeExample(p.question, str(p.answer), "calculator", (p.a, p.b, p.c), ("calculator",), CALCULATOR_EVAL_TURNS)
        for p in multi_turn.problems()[1]
    ]
    return EvalSet(
        "builtin:calculator",
        "episodes",
        f"the calculator RL env's {len(examples)} held-out products, never trained on, played as episodes of up to "
        f"{CALCULATOR_EVAL_TURNS} turns with the calculator tool (<calc>47 * 38</calc>, its result fed back); "
        "accuracy of the final answer (grader: numeric) and the tool calls per episode.",
        examples,
        max_tokens=32,
    )


def _code() -> EvalSet:
    from cookbook_engine.rl.code_problems import train_test_split

    _, test = train_test_split()
    examples = [GenerationExample(p.prompt, "\n".join(p.tests), "python_tests") for p in test]
    return EvalSet(
        "builtin:code",
        "generation",
        f"the code RL env's {len(examples)} held-out Python problems, run against their unit tests in "
        "the sandbox (grader: python_tests; samples=K gives pass@k).",
        examples,
        max_tokens=160,
    )


def _concise_prefs() -> EvalSet:
    _, test = datasets.load_preference_dataset(  # DPO's default split (config.py's defaults are these)
        "builtin:concise-prefs", test_fraction=DEFAULT_TEST_FRACTION, seed=DEFAULT_SEED
    )
    return EvalSet(
        "builtin:concise-prefs",
        "preference",
        f"the {len(test)} pairs that DPO on builtin:concise-prefs holds out (default split): does the "
        "model prefer the correct short answer?",
        test,
    )


def _as_preference_pairs(pairs) -> list:
    """builtin_data.PairRow items as the preference evaluator's pairs (a user prompt, one assistant reply a side)."""
    return [
        datasets.PreferencePair(
            [{"role": "user", "content": pair.prompt}],
            [{"role": "assistant", "content": pair.chosen}],
            [{"role": "assistant", "content": pair.rejected}],
        )
        for pair in pairs
    ]


def _prefs_style_controlled() -> EvalSet:
    examples = _as_preference_pairs(builtin_data.style_controlled_pairs())
    return EvalSet(
        "builtin:prefs-style-controlled",
        "preference",
        f"{len(examples)} held-out pairs never in builtin:concise-prefs, both answers the same sentence "
        "but for the answer (opposites, plurals, past tenses, first letters, bigger numbers, sums, "
        "capitals): does the model prefer the correct one when length and style cannot tell?",
        examples,
    )


def _prefs_unseen_kinds() -> EvalSet:
    from cookbook_engine.data.pref_kinds import UNSEEN_KINDS, unseen_kind_pairs

    examples = _as_preference_pairs(unseen_kind_pairs())
    return EvalSet(
        "builtin:prefs-unseen-kinds",
        "preference",
        f"{len(examples)} pairs of {len(UNSEEN_KINDS)} kinds builtin:concise-prefs never has "
        f"({', '.join(UNSEEN_KINDS)}), both answers the same sentence but for the answer: did DPO teach "
        "correctness, or only its own kinds?",
        examples,
    )


def _retention() -> EvalSet:
    from cookbook_engine.evals import retention

    items = builtin_data.retention_items()
    examples = [GenerationExample(i["prompt"], retention.grading_regex(i["key"], i["match"]), "regex") for i in items]
    return EvalSet(
        "builtin:retention",
        "generation",
        f"{len(examples)} ordinary questions the base model answers right (capitals, continents, languages and "
        "currencies of real countries, everyday facts, small sums and times tables, the day after, opposites, "
        "translations): a trained model should still answer them. Right = the reply names the answer (a whole word, "
        "or the last number).",
        examples,
        max_tokens=retention.MAX_TOKENS,
    )


SENTIMENT_LABELS = ["negative", "positive"]
SENTIMENT_INSTRUCTION = "Is the sentiment of this review positive or negative? Answer with one word."
_SUBJECTS = (
    "The soup",
    "This hotel",
    "The movie",
    "Our waiter",
    "The battery",
    "This novel",
    "The concert",
    "The new phone",
    "The museum tour",
    "The delivery",
)
_POSITIVE = (
    "was wonderful and I would gladly come back",
    "exceeded every expectation I had",
    "made my whole week better",
    "was a delight from start to finish",
    "was excellent value for the money",
)
_NEGATIVE = (
    "was a complete waste of money",
    "left me angry and disappointed",
    "was the worst I have ever had",
    "broke down after a single day",
    "was boring and far too long",
)
_OPENERS = ("", "Honestly, ", "Well, ", "To be fair, ")


def sentiment_rows() -> list[dict]:
    """200 short reviews, 100 positive and 100 negative, built from templates (same rows on every machine)."""
    rng = random.Random(11)
    rows = []
    for label, endings in (("positive", _POSITIVE), ("negative", _NEGATIVE)):
        for subject in _SUBJECTS:
            for ending in endings:
                for opener in rng.sample(_OPENERS, 2):
                    text = f"{opener}{subject[0].lower() if opener else subject[0]}{subject[1:]} {ending}."
                    rows.append({"prompt": f"{SENTIMENT_INSTRUCTION}\n\nReview: {text}", "label": label})
    rng.shuffle(rows)
    return rows


def _sentiment() -> EvalSet:
    examples = [ClassificationExample(r["prompt"], r["label"]) for r in sentiment_rows()]
    return EvalSet(
        "builtin:sentiment",
        "classification",
        f"{len(examples)} short product and place reviews, half positive and half negative; the label "
        "is parsed from the reply (accuracy, macro-F1, per-label precision/recall).",
        examples,
        labels=list(SENTIMENT_LABELS),
        max_tokens=8,
    )


BUILTIN_SETS: dict[str, Callable[[], EvalSet]] = {
    "facts-probes": _facts_probes,
    "facts-nll": _facts_nll,
    "persona-probes": _persona_probes,
    "arithmetic": _arithmetic,
    "arithmetic-fresh": _fresh_arithmetic("arithmetic-fresh", "+", 10, 99, "sums of two two-digit numbers"),
    "arithmetic-subtraction": _fresh_arithmetic(
        "arithmetic-subtraction", "-", 10, 99, "differences of two two-digit numbers (transfer: training only adds)"
    ),
    "arithmetic-three-digit": _fresh_arithmetic(
        "arithmetic-three-digit", "+", 100, 999, "sums of two three-digit numbers (transfer: training stays under 100)"
    ),
    "code": _code,
    "calculator": _calculator,
    "concise-prefs": _concise_prefs,
    "prefs-style-controlled": _prefs_style_controlled,
    "sentiment": _sentiment,
    "prefs-unseen-kinds": _prefs_unseen_kinds,
    "retention": _retention,
}


def list_builtin() -> list[dict]:
    """name, kind, size and one-line description of every built-in eval set."""
    out = []
    for name in BUILTIN_SETS:
        eval_set = load_eval_set(BUILTIN_PREFIX + name)
        out.append(
            {
                "name": eval_set.name,
                "kind": eval_set.kind,
                "examples": len(eval_set.examples),
                "description": eval_set.description,
            }
        )
    return out


# ------------------------------------------------------------------------------------------------ loading


def load_eval_set(spec: str, max_examples: int = 0) -> EvalSet:
    """The eval set a spec names, capped to its first `max_examples` examples (0 = all)."""
    spec = spec.strip()
    if not spec:
        raise EvalSetError("eval set: empty name; use builtin:NAME or a file path")
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX) :]
        if name not in BUILTIN_SETS:
            raise EvalSetError(
                f"{spec}: no such built-in eval set; choose one of "
                f"{', '.join(BUILTIN_PREFIX + n for n in BUILTIN_SETS)}"
            )
        eval_set = BUILTIN_SETS[name]()
    else:
        eval_set = _from_file(spec)
    if max_examples < 0:
        raise EvalSetError(f"max_examples={max_examples}: must be 0 (all) or more")
    if max_examples:
        eval_set.examples = eval_set.examples[:max_examples]
    if not eval_set.examples:
        raise EvalSetError(f"{spec}: no examples")
    return eval_set


def _from_file(spec: str) -> EvalSet:
    try:
        rows = datasets.preview(spec, n=10**9)
        if rows and all(isinstance(r, dict) and "label" in r for r in rows):
            return _classification_file(spec, rows)
        kind = datasets.detect_kind(spec)
        if kind == "chat":
            data = datasets.load_chat_dataset(spec, test_fraction=0.0)
            return EvalSet(
                spec,
                "nll",
                f"NLL of the last assistant message of {len(data.train)} conversations",
                [ChatExample(tuple(m)) for m in data.train],
            )
        if kind == "preference":
            pairs, _ = datasets.load_preference_dataset(spec, test_fraction=0.0)
            return EvalSet(spec, "preference", f"{len(pairs)} preference pairs", pairs)
        problems, _ = datasets.load_rl_problems(spec, test_fraction=0.0)
    except datasets.DatasetError as exc:
        raise EvalSetError(str(exc)) from exc
    examples = [GenerationExample(p.prompt, p.answer, p.grader) for p in problems]
    graders_used = ", ".join(sorted({e.grader for e in examples}))
    return EvalSet(spec, "generation", f"{len(examples)} prompts graded by {graders_used}", examples)


def _classification_file(spec: str, rows: list[dict]) -> EvalSet:
    examples, labels = [], set()
    for index, row in enumerate(rows):
        prompt = row.get("prompt") or row.get("question") or row.get("text")
        label = row.get("label")
        if not isinstance(prompt, str) or not prompt.strip():
            raise EvalSetError(f"{spec}: row {index + 1}: 'prompt' (or 'question'/'text') is missing or empty")
        if not isinstance(label, (str, int)) or isinstance(label, bool) or not str(label).strip():
            raise EvalSetError(f"{spec}: row {index + 1}: 'label' must be a non-empty string")
        labels.add(str(label).strip())
        labels.update(str(x).strip() for x in row.get("labels") or [])
        examples.append(ClassificationExample(prompt, str(label).strip()))
    if len(labels) < 2:
        raise EvalSetError(f"{spec}: classification needs at least two labels, found {sorted(labels)}")
    return EvalSet(
        spec,
        "classification",
        f"{len(examples)} prompts, labels {', '.join(sorted(labels))}",
        examples,
        labels=sorted(labels),
        max_tokens=16,
    )


def split_names(evals: str) -> list[str]:
    return [name.strip() for name in (evals or "").split(",") if name.strip()]


def problems(evals: str) -> list[str]:
    """What is wrong with each named eval set (config validation shows these before a run exists)."""
    found = []
    for name in split_names(evals):
        try:
            load_eval_set(name)
        except (ValueError, FileNotFoundError) as exc:
            found.append(f"evals: {str(exc).splitlines()[0]}")
    return found
