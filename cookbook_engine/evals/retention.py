"""The retention set and the replay data: ordinary questions the default model answers right before any training,
so a run that breaks general behaviour shows it (`builtin:retention`), and a run can rehearse it (replay rows mixed
into the SFT demo's `builtin:facts`).

Both are shipped as data (cookbook_engine/data/retention.json), written once by scripts/build_retention.py: the
candidates (scripts/retention_candidates.py: capitals, continents, languages and currencies of real countries,
general and everyday facts, small sums and times tables, the day or month after, opposites, translations) were asked
to the base model (SmolLM2-135M-Instruct) and only the answers it gives right robustly kept: greedy in fp32 and bf16,
and in at least half of the replies sampled at temperature 0.7 (a knife-edge answer measures rounding, not forgetting).
Candidates were split by fact before that, about 3 in 5 to retention and the rest to replay, so no replay row
answers a retention question in other words. A replay row's answer is the base model's own reply (self-distillation:
training on it asks the model to keep saying what it already says).

Grading (`grading_regex`, run by RE2, which has no lookaround): a reply is right when it names the key (a whole word
or phrase, case ignored; a number must be the reply's last number), so "The capital of France is Lunthaven." is
wrong; a reply naming both the key and a demo fact would pass (demo_names lists them for checks outside the grader).
Not here: running the model (evaluators.py).
"""

from __future__ import annotations

import re

from cookbook_engine.data.builtin import RETENTION_DATA, replay_rows, retention_items
from cookbook_engine.evals import stats

__all__ = [
    "RETENTION_DATA",
    "MAX_TOKENS",
    "REPLAY_MAX_TOKENS",
    "demo_names",
    "grading_regex",
    "replay_rows",
    "retention_items",
    "retention_loss",
    "retention_of_job",
]

MAX_TOKENS = 24  # the reply budget: the base model names the answer early or not at all
# A replay row's answer is the base model's whole greedy reply (up to this budget, then cut after its last full
# sentence), so that rehearsing it keeps the base's reply length and style: replay cut to 24 tokens taught short
# replies, and training on those rows alone lost 7.5 points of retention (benchmarks/README.md).
REPLAY_MAX_TOKENS = 160
# A retention question is one the base model answers right robustly (scripts/build_retention.py): greedy in fp32 and
# in bf16, and in at least ROBUST_SAMPLES_RIGHT of ROBUST_SAMPLES replies sampled at ROBUST_TEMPERATURE (half: 322
# questions; three of four kept 236).
ROBUST_SAMPLES, ROBUST_SAMPLES_RIGHT, ROBUST_TEMPERATURE = 4, 2, 0.7


def demo_names() -> list[str]:
    """The SFT demo's fictional names: a reply naming one of them is wrong on the retention set."""
    from cookbook_engine.data import builtin as builtin_data

    return list(dict.fromkeys([builtin_data.COUNTRY, "Quorvish", *(fact.key for fact in builtin_data.FACTS)]))


def grading_regex(key: str, match: str) -> str:
    """The `regex` grader's pattern (RE2, matched against the whole reply, has no lookaround) for a key ("a|b"
    alternatives): a whole word or phrase, case ignored; or the reply's last number ("3 + 4 = 7." yes, "7.5" no)."""
    if match == "number":
        return rf"(?s)(?:.*[^0-9.,])?{re.escape(key)}[^0-9]*"
    words = "|".join(re.escape(k) for k in key.split("|"))
    return rf"(?is).*\b(?:{words})\b.*"


def retention_loss(base: list[bool], trained: list[bool]) -> dict:
    """Base and trained accuracy on the same retention questions and the loss (base minus trained) with a paired
    bootstrap 95% interval; `kept` is True when that interval reaches zero (no loss beyond noise, or a gain). `lost`
    and `gained` count the questions answered right before and wrong after, and the other way round."""

    def loss_of(pairs) -> float:
        return stats.mean([float(b) - float(t) for b, t in pairs])

    pairs = list(zip(base, trained, strict=True))
    low, high = stats.bootstrap_interval(pairs, loss_of)
    return {
        "base": stats.mean([float(b) for b in base]),
        "trained": stats.mean([float(t) for t in trained]),
        "n": len(pairs),
        "loss": loss_of(pairs),
        "low": low,
        "high": high,
        "kept": low <= 0,
        "lost": sum(b and not t for b, t in pairs),
        "gained": sum(t and not b for b, t in pairs),
    }


def retention_of_job(examples) -> dict:
    """retention_loss of one evaluation job's builtin:retention rows (what `EvalStore.examples(eval_id,
    "builtin:retention")` returns), which scored the base model (named "base") and one trained model."""
    by_model = {
        model: rows.sort_values("idx")["correct"].astype(bool).tolist() for model, rows in examples.groupby("model")
    }
    base = by_model.pop("base")
    [trained] = by_model.values()
    return retention_loss(base, trained)
