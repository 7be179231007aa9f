"""Write cookbook_engine/data/retention.json: the retention set and the replay data (see evals/retention.py).

Run once, offline, under the heavy lock (it samples the base model on every candidate, greedy):
    flock /work/wt/heavy.lock nice -n 10 .venv/bin/python scripts/build_retention.py

Steps: the candidates (scripts/retention_candidates.py) are split by fact (a stable hash: about 3 in 5 facts to
retention); every candidate is asked to the base model, greedy, with the retention set's token budget (batched:
benchmarks/batched_greedy.py, minutes instead of an hour), graded by evals.retention.grading_regex; only the right
answers are kept; replay keeps the base model's reply as the answer (cut after its last full sentence when the
reply was cut by the token budget).
"""

from __future__ import annotations

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

from retention_candidates import candidates  # noqa: E402

from cookbook_engine.evals import retention  # noqa: E402

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


def main() -> None:
    import batched_greedy
    import torch

    from cookbook_engine.rl import graders

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    pool = candidates()
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}  # prompt -> the base model's reply
    asked = [c.prompt for c in pool if c.prompt not in cache]
    if asked:
        model, tokenizer, renderer = batched_greedy.load()
        cache |= dict(zip(asked, batched_greedy.replies(model, tokenizer, renderer, asked, retention.MAX_TOKENS)))
        CACHE.write_text(json.dumps(cache, indent=1))
    outputs = [cache[c.prompt] for c in pool]
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
            kept.append({**item, "base_reply": output})
        else:
            reply = replay_reply(output)
            if reply and re.search(retention.grading_regex(c.key, c.match), reply):
                replay.append({**item, "reply": reply})
    random.Random(0).shuffle(kept)
    random.Random(1).shuffle(replay)
    out = {
        "about": "built by scripts/build_retention.py: base-model (SmolLM2-135M-Instruct, greedy) right answers only",
        "candidates_right_by_category": by_category,
        "retention": kept,
        "replay": replay,
    }
    retention.RETENTION_DATA.parent.mkdir(exist_ok=True)
    retention.RETENTION_DATA.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(pool)} candidates; retention {len(kept)}, replay {len(replay)}; right by category: {by_category}")


if __name__ == "__main__":
    main()
