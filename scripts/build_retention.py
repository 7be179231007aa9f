"""Write cookbook_engine/data/retention.json: the retention set and the replay data (see evals/retention.py).

Run once, offline, under the heavy lock (it samples the base model on every candidate, greedy):
    flock /work/wt/heavy.lock nice -n 10 .venv/bin/python scripts/build_retention.py

Steps: the candidates (scripts/retention_candidates.py) are split by fact (a stable hash: about 3 in 5 facts to
retention); every candidate is asked to the base model, greedy, with the retention set's token budget (batched:
benchmarks/batched_greedy.py, minutes instead of an hour), graded by evals.retention.grading_regex; only the right
answers are kept; replay keeps the base model's whole greedy reply as the answer, asked again with the longer budget
REPLAY_MAX_TOKENS (cut after its last full sentence when even that budget cut it), so rehearsing it does not teach
shorter replies.

A retention question must also be one the base model answers right robustly, not by a near-tie: greedy in bf16 too
(with the fp32 head the local backend uses) and in at least ROBUST_SAMPLES_RIGHT of ROBUST_SAMPLES replies sampled at
ROBUST_TEMPERATURE. A set of knife-edge answers measures rounding, not forgetting: on the first set (greedy fp32
only), 23 of 389 answers flipped with bf16 alone, and "How many months are in a year?" passed on "... 365 * 12".
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "benchmarks"))

from retention_candidates import NEIGHBOUR_CATEGORY, NEIGHBOURS_PER_FACT, candidates, neighbour_prompts  # noqa: E402

from cookbook_engine.evals import retention  # noqa: E402
from cookbook_engine.evals.retention import ROBUST_SAMPLES, ROBUST_SAMPLES_RIGHT, ROBUST_TEMPERATURE  # noqa: E402

RETENTION_SHARE = 0.6
# the base model's replies asked so far (greedy, deterministic): a rebuild after adding candidates asks only the new
CACHE = Path(os.environ.get("RETENTION_CACHE", "/tmp/cookbook-retention-replies.json"))


def to_retention(fact: str) -> bool:
    return int(hashlib.sha256(fact.encode()).hexdigest()[:8], 16) / 16**8 < RETENTION_SHARE


def replay_reply(reply: str) -> str:
    reply = reply.strip()
    if reply.endswith((".", "!", "?")):
        return reply
    ends = [m.end() for m in re.finditer(r"[.!?](\s|$)", reply)]
    return reply[: ends[-1]].strip() if ends else ""


@functools.cache
def base_model():
    """The fp32 base model, loaded once however many steps of the build ask it something new."""
    import batched_greedy

    return batched_greedy.load()


def full_replies(prompts: list[str], cache: dict) -> dict[str, str]:
    """The base model's greedy replies to `prompts` with the replay budget (cached under "full:" keys)."""
    import batched_greedy

    new = [p for p in prompts if f"full:{p}" not in cache]
    model, tokenizer, renderer = base_model() if new else (None, None, None)
    for start in range(0, len(new), 64):  # saved as it goes: a long budget over hundreds of prompts takes a while
        chunk = new[start : start + 64]
        got = batched_greedy.replies(model, tokenizer, renderer, chunk, retention.REPLAY_MAX_TOKENS)
        cache |= {f"full:{p}": reply for p, reply in zip(chunk, got, strict=True)}
        CACHE.write_text(json.dumps(cache, indent=1))
        print(f"full replies: {start + len(chunk)} of {len(new)}", flush=True)
    return {p: cache[f"full:{p}"] for p in prompts}


def robust_right(pool, outputs: list[str], cache: dict) -> dict[str, dict]:
    """For each retention-side candidate the base model answers right greedily in fp32: whether it also does so in
    bf16 and in enough sampled replies: {"robust", "bf16_reply", "samples_right"} (the replies are cached under
    "bf16:" and "sample{i}:" keys)."""
    import batched_greedy
    import torch

    from cookbook_engine.rl import graders

    def right(candidate, reply: str) -> bool:
        return graders.grade("regex", reply, retention.grading_regex(candidate.key, candidate.match)).correct

    checked = [c for c, o in zip(pool, outputs, strict=True) if to_retention(c.fact) and right(c, o)]
    asked = [c.prompt for c in checked if "bf16:" + c.prompt not in cache]
    if asked:
        model, tokenizer, renderer = batched_greedy.load(dtype=torch.bfloat16)
        got = batched_greedy.replies(model, tokenizer, renderer, asked, retention.MAX_TOKENS)
        cache |= {"bf16:" + prompt: reply for prompt, reply in zip(asked, got, strict=True)}
        CACHE.write_text(json.dumps(cache, indent=1))
    asked = [c.prompt for c in checked if "sample0:" + c.prompt not in cache]
    if asked:  # each prompt ROBUST_SAMPLES times in a row, in big batches (a CPU decodes 128 rows nearly as fast as 32)
        model, tokenizer, renderer = base_model()
        torch.manual_seed(0)
        repeated = [prompt for prompt in asked for _ in range(ROBUST_SAMPLES)]
        got = batched_greedy.replies(
            model, tokenizer, renderer, repeated, retention.MAX_TOKENS, batch_size=128, temperature=ROBUST_TEMPERATURE
        )
        for index, prompt in enumerate(repeated):
            cache[f"sample{index % ROBUST_SAMPLES}:" + prompt] = got[index]
        CACHE.write_text(json.dumps(cache, indent=1))
    result = {}
    for c in checked:
        samples = sum(right(c, cache[f"sample{i}:" + c.prompt]) for i in range(ROBUST_SAMPLES))
        result[c.prompt] = {
            "robust": right(c, cache["bf16:" + c.prompt]) and samples >= ROBUST_SAMPLES_RIGHT,
            "bf16_reply": cache["bf16:" + c.prompt],
            "samples_right": samples,
        }
    return result


def neighbour_rows(cache: dict, kept: list[dict]) -> list[dict]:
    """The base model's own replies to the demo facts' questions asked about real subjects (neighbour_prompts), for
    the SFT demo to mix in. None leaks a retention answer: a capital, currency or language neighbour asks only about
    a replay-side fact, and a reply naming a retention answer about the same subject, or a general question's word
    answer, is dropped."""
    import batched_greedy

    from cookbook_engine.data import builtin as builtin_data

    asked = neighbour_prompts([(fact.key, fact.questions) for fact in builtin_data.FACTS])
    new = [prompt for _, _, prompt in asked if prompt not in cache]
    if new:
        model, tokenizer, renderer = base_model()
        cache |= dict(zip(new, batched_greedy.replies(model, tokenizer, renderer, new, retention.MAX_TOKENS)))
        CACHE.write_text(json.dumps(cache, indent=1))
    general = [i["key"] for i in kept if i["category"] in ("general", "everyday") and i["match"] == "word"]
    rows: list[dict] = []
    for key, subject, prompt in asked:
        category = NEIGHBOUR_CATEGORY.get(key)
        if category and to_retention(f"{category}:{subject}"):
            continue
        if sum(row["fact"].startswith(f"neighbour:{key}:") for row in rows) >= NEIGHBOURS_PER_FACT:
            continue
        reply = replay_reply(cache[prompt])  # the retention budget's reply: these rows are not mixed in by default
        same_subject = [i["key"] for i in kept if i["fact"].split(":", 1)[1] == subject]
        leaks = [k for k in same_subject + general if re.search(retention.grading_regex(k, "word"), reply)]
        if reply and not leaks:
            rows.append({"prompt": prompt, "reply": reply, "fact": f"neighbour:{key}:{subject}"})
    return rows


def main() -> None:
    import batched_greedy
    import torch

    from cookbook_engine.rl import graders

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    pool = candidates()
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}  # prompt -> the base model's reply
    asked = [c.prompt for c in pool if c.prompt not in cache]
    if asked:
        model, tokenizer, renderer = base_model()
        cache |= dict(zip(asked, batched_greedy.replies(model, tokenizer, renderer, asked, retention.MAX_TOKENS)))
        CACHE.write_text(json.dumps(cache, indent=1))
    outputs = [cache[c.prompt] for c in pool]
    robust = robust_right(pool, outputs, cache)
    replay_side = [  # only the replies that will be replay rows: right within the retention budget
        c.prompt
        for c, output in zip(pool, outputs, strict=True)
        if not to_retention(c.fact) and graders.grade("regex", output, retention.grading_regex(c.key, c.match)).correct
    ]
    full = full_replies(replay_side, cache)
    kept, replay = [], []
    by_category: dict[str, list[int]] = {}
    for c, output in zip(pool, outputs, strict=True):
        right = graders.grade("regex", output, retention.grading_regex(c.key, c.match)).correct
        by_category.setdefault(c.category, [0, 0])
        by_category[c.category][0] += right
        by_category[c.category][1] += 1
        if not right:
            continue
        item = {"prompt": c.prompt, "key": c.key, "match": c.match, "category": c.category, "fact": c.fact}
        if to_retention(c.fact):
            evidence = robust[c.prompt]
            if not evidence.pop("robust"):
                continue
            kept.append({**item, "base_reply": output, **evidence})
        else:
            reply = replay_reply(full[c.prompt])
            if reply and re.search(retention.grading_regex(c.key, c.match), reply):
                replay.append({**item, "reply": reply})
    asked_by_retention = {item["prompt"] for item in kept}  # one wording can be two candidates' ("general:..." too)
    replay = [row for row in replay if row["prompt"] not in asked_by_retention]
    random.Random(0).shuffle(kept)
    random.Random(1).shuffle(replay)
    out = {
        "about": "built by scripts/build_retention.py: base-model (SmolLM2-135M-Instruct, greedy) right answers only",
        "candidates_right_by_category": by_category,
        "retention": kept,
        "replay": replay,
        "neighbours": neighbour_rows(cache, kept),
    }
    retention.RETENTION_DATA.parent.mkdir(exist_ok=True)
    retention.RETENTION_DATA.write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"{len(pool)} candidates; retention {len(kept)}, replay {len(replay)}, neighbours {len(out['neighbours'])}; "
        f"right by category: {by_category}"
    )


if __name__ == "__main__":
    main()
