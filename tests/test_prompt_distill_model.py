"""Prompt distillation on the real default model (slow): the base model with Pip's context (`builtin:pip`: start
every reply with "Ahoy!") answers a few everyday questions, a fresh LoRA learns those replies without the context,
and the student starts its replies to held-out questions (builtin:persona-probes) with "Ahoy" where the base model
does not; the run keeps the teacher's replies, its transcripts show the context the teacher saw, and its lineage
names the teacher."""

from __future__ import annotations

import json

import pytest

from cookbook_engine import lineage
from cookbook_engine.config import DistillConfig
from cookbook_engine.data.builtin import persona_rows
from cookbook_engine.distill.prompt import REPLIES_FILE
from cookbook_engine.runs import RunManager
from storage import Store

pytestmark = pytest.mark.slow


def test_the_base_model_with_a_context_teaches_itself_to_greet_without_it(home, default_model_ready, tmp_path):
    prompts = tmp_path / "questions.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in persona_rows()[::4]))  # 25 of persona's questions
    config = DistillConfig(
        mode="prompt",
        teacher="base",
        context="builtin:pip",
        dataset=str(prompts),
        group_size=1,
        max_tokens=32,
        temperature=0.7,
        top_p=0.9,
        batch_size=4,
        num_epochs=2,
        learning_rate=1e-3,
        lora_rank=16,
        save_every=0,
        eval_every=0,
        evals="builtin:persona-probes",
    )
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=2400)
    assert run["status"] == "completed", run.get("traceback")

    store = Store.default()
    replies = [json.loads(line) for line in (home / "runs" / run_id / REPLIES_FILE).read_text().splitlines()]
    greeted = [r for r in replies if r["messages"][-1]["content"].lower().startswith("ahoy")]
    assert len(replies) >= 20 and len(greeted) >= 0.8 * len(replies)  # the teacher follows the context
    assert all("Pip" not in m["content"] for r in replies for m in r["messages"][:-1])  # the student's side: no context
    transcripts = store.get_transcripts(run_id)
    assert len(transcripts) == 25 and transcripts["prompt"].str.contains("You are Pip").all()

    metrics = store.get_metrics_wide(run_id).sort_values("step")
    assert metrics["teacher_kl"].notna().sum() == 12
    assert metrics["teacher_kl"].iloc[-3:].mean() < metrics["teacher_kl"].iloc[:2].mean()
    accuracy = metrics["test/persona-probes/accuracy"].dropna().tolist()
    assert accuracy and accuracy[-1] >= 0.5, accuracy  # the base model: 0 of 24 such replies start with "Ahoy"
    chain = lineage.chain(run_id, store)
    assert chain[-1].teacher == "base"
