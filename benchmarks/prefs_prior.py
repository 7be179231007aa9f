"""A diagnostic for issue 23 (item 2): where the base model's preferences on `builtin:prefs-unseen-kinds` go wrong.

For each pair it scores the chosen and the rejected reply as the preference evaluator does (the summed
log-probability of the reply and its end token after the chat-templated question), and again after an empty question
("Say something."), then counts per kind how often the right reply wins by the first score (what the evaluator
measures) and by the difference of the two (pointwise mutual information: how much the question itself raises the
reply). Where PMI is right and the plain score wrong, the model's wrong choice is the reply's own prior, not
ignorance. Not a training experiment: no run, no adapter.

Run (about 2 minutes alone on a 2-core CPU, fp32): ../.venv/bin/python prefs_prior.py
Appends to results/prefs_prior.json.
"""

from __future__ import annotations

import collections
import time

import common
import torch

from cookbook_engine import models
from cookbook_engine.data import pref_kinds

RESULTS = common.RESULTS / "prefs_prior.json"
EMPTY_QUESTION = "Say something."


def reply_scorer():
    """The base model in fp32 and a function (prompt, reply) -> the summed log-probability of the reply and its end
    token after the chat-templated prompt, as the preference evaluators score a side of a pair."""
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    model = models.load_model(models.DEFAULT_MODEL, dtype=torch.float32).eval()

    def logprob(prompt: str, reply: str) -> float:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        reply_ids = tokenizer(reply + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt_ids + reply_ids])
        with torch.no_grad():
            logprobs = model(ids).logits[0, len(prompt_ids) - 1 : -1].float().log_softmax(-1)
        return float(logprobs.gather(-1, ids[0, len(prompt_ids) :, None]).sum())

    return logprob


def main() -> None:
    logprob = reply_scorer()
    right: collections.Counter = collections.Counter()
    asked: collections.Counter = collections.Counter()
    for pair in pref_kinds.unseen_kind_pairs():
        chosen, rejected = logprob(pair.prompt, pair.chosen), logprob(pair.prompt, pair.rejected)
        prior = logprob(EMPTY_QUESTION, pair.chosen) - logprob(EMPTY_QUESTION, pair.rejected)
        asked[pair.kind] += 1
        right[(pair.kind, "preference")] += chosen > rejected
        right[(pair.kind, "pmi")] += chosen - rejected > prior
    by_kind = {
        kind: {way: f"{right[(kind, way)]}/{n}" for way in ("preference", "pmi")} for kind, n in sorted(asked.items())
    }
    total = sum(asked.values())
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": common.machine(),
        "dtype": "float32",
        "n": total,
        "preference": round(sum(right[(k, "preference")] for k in asked) / total, 3),
        "pmi": round(sum(right[(k, "pmi")] for k in asked) / total, 3),
        "by_kind": by_kind,
    }
    common.print_and_append(RESULTS, result)


if __name__ == "__main__":
    main()
