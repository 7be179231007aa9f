"""Which `builtin:retention` answers trained runs lose, and how near a tie the base model's greedy reply was there.

For each of the 322 retention questions: the base model's greedy reply (fp32, batched, as sft_retention_sweep.py
asks) and its margin, the smallest gap in log-probability between the chosen token and the runner-up over the reply's
tokens up to the one that completes the right answer (after that a different token cannot unsay it). Then, for each
adapter given, which questions it answers wrong that the base model answered right. Prints how many each run lost
per band of the base model's margin and how many questions every run lost; writes results/retention_margins.json.

Run (a few minutes per adapter on a 2-core CPU):
    .venv/bin/python benchmarks/retention_margins.py demo=/path/to/adapter_folder other=/path/to/another
"""

from __future__ import annotations

import sys

import batched_greedy
import common
import torch

from cookbook_engine.data.builtin import retention_items
from cookbook_engine.evals.retention import MAX_TOKENS, grading_regex
from cookbook_engine.rl import graders

BANDS = [(0.0, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, float("inf"))]


def right(reply: str, item: dict) -> bool:
    return graders.grade("regex", reply, grading_regex(item["key"], item["match"])).correct


def answers(adapter: str | None) -> tuple[list[str], tuple]:
    loaded = batched_greedy.load(adapter)
    prompts = [i["prompt"] for i in retention_items()]
    return batched_greedy.replies(*loaded, prompts, MAX_TOKENS), loaded


@torch.no_grad()
def margins(replies: list[str], loaded: tuple) -> list[float]:
    """Per question: the least log-prob gap between the greedy token and the runner-up until the answer is named."""
    model, tokenizer, renderer = loaded
    out = []
    for item, reply in zip(retention_items(), replies, strict=True):
        prompt = renderer.build_generation_prompt([{"role": "user", "content": item["prompt"]}]).to_ints()
        reply_ids = tokenizer.encode(reply, add_special_tokens=False)[:MAX_TOKENS]
        logp_T_V = torch.log_softmax(model(input_ids=torch.tensor([prompt + reply_ids])).logits[0].float(), -1)
        gaps = []
        for k in range(len(reply_ids)):
            top2 = logp_T_V[len(prompt) - 1 + k].topk(2).values
            gaps.append(float(top2[0] - top2[1]))
            if right(tokenizer.decode(reply_ids[: k + 1]), item):
                break
        out.append(min(gaps, default=0.0))
    return out


def main() -> None:
    torch.set_num_threads(2)
    items = retention_items()
    base_replies, loaded = answers(None)
    base_right = [right(r, i) for r, i in zip(base_replies, items, strict=True)]
    base_margins = margins(base_replies, loaded)
    runs = {}
    for name, folder in (arg.split("=", 1) for arg in sys.argv[1:]):
        replies, _ = answers(folder)
        lost = [q for q, (r, i) in enumerate(zip(replies, items, strict=True)) if base_right[q] and not right(r, i)]
        runs[name] = {"adapter": folder, "lost": lost, "replies": replies}
    print(f"base model: {sum(base_right)} of {len(items)} right")
    print("base margin band | questions | " + " | ".join(f"lost by {name}" for name in runs))
    for low, high in BANDS:
        band = [q for q in range(len(items)) if base_right[q] and low <= base_margins[q] < high]
        counts = " | ".join(str(sum(q in set(run["lost"]) for q in band)) for run in runs.values())
        print(f"[{low}, {high}) | {len(band)} | {counts}")
    if runs:
        every = set.intersection(*(set(run["lost"]) for run in runs.values()))
        some = set.union(*(set(run["lost"]) for run in runs.values()))
        print(f"lost by every run: {len(every)}; by at least one: {len(some)}")
    common.write_result(
        "retention_margins",
        {"base_right": base_right, "base_margins": base_margins, "base_replies": base_replies, "runs": runs},
    )


if __name__ == "__main__":
    main()
