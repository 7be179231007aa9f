"""The contrast-twin pairs of issue 23's DPO experiment (benchmarks/dpo_contrast_data.py): every answer is chosen
exactly as often as it is rejected, the chosen answers are right, and no pair asks what an eval set asks (the unseen
kinds, the default's held-out kinds, retention) or about a word those sets ask about, so the figures measured with
them are measured on questions never trained."""

from __future__ import annotations

import collections
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from dpo_contrast_data import contrast_pairs  # noqa: E402

from cookbook_engine.data import builtin, pref_kinds  # noqa: E402


def test_every_answer_is_chosen_as_often_as_rejected_and_twins_flip_the_question():
    for seed in (0, 1):
        pairs = contrast_pairs(12, seed)
        assert len(pairs) >= 300 and len({p.prompt for p in pairs}) == len(pairs)
        counts: collections.Counter = collections.Counter()
        for pair in pairs:
            assert pair.chosen != pair.rejected, pair
            prefix = len(os.path.commonprefix([pair.chosen, pair.rejected]))
            suffix = len(os.path.commonprefix([pair.chosen[::-1], pair.rejected[::-1]]))
            chosen, rejected = (
                pair.chosen[prefix : len(pair.chosen) - suffix],
                pair.rejected[prefix : len(pair.rejected) - suffix],
            )
            assert len(pair.chosen) - len(chosen) >= 10, pair  # one sentence, only the answer slot differs
            counts[(pair.kind, chosen)] += 1
            counts[(pair.kind, rejected)] -= 1
        assert not [key for key, balance in counts.items() if balance], "an answer chosen more often than rejected"


def test_the_chosen_answers_are_right():
    checks = 0
    for pair in contrast_pairs(12, 0):
        prompt, chosen = pair.prompt, pair.chosen
        if m := re.fullmatch(r"What is double (\d+)\?", prompt):
            assert chosen == f"Double {m[1]} is {2 * int(m[1])}."
        elif m := re.fullmatch(r"What is half of (\d+)\?", prompt):
            assert chosen == f"Half of {m[1]} is {int(m[1]) // 2}."
        elif m := re.fullmatch(r"What is the (tens|ones) digit of (\d\d)\?", prompt):
            assert chosen.endswith(f" is {m[2][0 if m[1] == 'tens' else 1]}.")
        elif m := re.fullmatch(r"What number comes right (after|before) (\d+)\?", prompt):
            assert chosen.endswith(f" is {int(m[2]) + (1 if m[1] == 'after' else -1)}.")
        elif m := re.fullmatch(r"What is the (first|second|third) letter of the word '(\w+)'\?", prompt):
            assert chosen.endswith(f" is '{m[2][('first', 'second', 'third').index(m[1])]}'.")
        elif m := re.fullmatch(r"Which number is (even|odd), (\d+) or (\d+)\?", prompt):
            number = int(re.findall(r"\d+", chosen)[0])
            assert number % 2 == (0 if m[1] == "even" else 1)
        else:
            continue
        checks += 1
    assert checks >= 100


def test_no_pair_asks_an_eval_question_or_about_an_eval_word():
    pairs = contrast_pairs(12, 0) + contrast_pairs(12, 1)
    held_out = pref_kinds.unseen_kind_pairs() + builtin.style_controlled_pairs()
    asked = {builtin._normalised(p.prompt) for p in held_out}
    asked |= {builtin._normalised(item["prompt"]) for item in builtin.retention_items()}
    assert not asked & {builtin._normalised(p.prompt) for p in pairs}
    eval_words = set(pref_kinds.WORDS) | set(builtin.LETTER_WORDS_HELD_OUT)
    assert not eval_words & {w for p in pairs for w in builtin._normalised(p.prompt).split()}
