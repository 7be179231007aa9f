"""On-policy distillation and the RL KL penalty on the real default model (slow): a teacher taught one fact by SFT
is distilled into a fresh LoRA on the questions alone (no answers in the data), and the student's reverse KL to the
teacher falls while its replies move toward the teacher's; an RL run with a KL penalty logs the policy's KL to the
base model, which is 0 before the first step changes the weights."""

from __future__ import annotations

import json

import pytest

from cookbook_engine import lineage
from cookbook_engine.config import DistillConfig, RLConfig, SLConfig
from cookbook_engine.runs import RunManager
from storage import Store
from tests.test_sl_end_to_end import ANSWER, QUESTIONS  # the same one-fact data the SL test teaches

pytestmark = pytest.mark.slow


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_a_student_distilled_from_a_fact_teacher_moves_toward_it(home, default_model_ready, tmp_path):
    facts = write_rows(
        tmp_path / "facts.jsonl",
        [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": ANSWER}]} for q in QUESTIONS],
    )
    prompts = write_rows(tmp_path / "prompts.jsonl", [{"prompt": q, "answer": "-"} for q in QUESTIONS])
    manager = RunManager()
    teacher_run = manager.start(
        SLConfig(dataset=facts, test_fraction=0.0, max_steps=14, batch_size=4, learning_rate=1e-3, lora_rank=16)
    )
    assert manager.wait(teacher_run, timeout=900)["status"] == "completed"
    store = Store.default()
    teacher = store.last_checkpoint(teacher_run)["state_path"]

    config = DistillConfig(
        teacher=teacher,
        dataset=prompts,
        max_steps=8,
        groups_per_batch=4,
        group_size=4,
        max_tokens=24,
        learning_rate=1e-3,
        lora_rank=16,
        save_every=0,
        eval_every=0,
    )
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=1800)
    assert run["status"] == "completed", run.get("traceback")
    metrics = store.get_metrics_wide(run_id).sort_values("step")
    kl_S = metrics["teacher_kl"].tolist()
    assert len(kl_S) == 8 and all(value > 0 for value in kl_S[:2])
    assert sum(kl_S[-3:]) / 3 < 0.7 * sum(kl_S[:3]) / 3, kl_S  # the student's tokens came to suit the teacher
    assert (metrics["distill/student_logprob"] <= 0).all() and (metrics["distill/teacher_logprob"] <= 0).all()
    rows = store.get_transcripts(run_id)
    assert len(rows) == 8 * 4 * 4 and set(rows["reward"]) == {0.0}
    chain = lineage.describe(lineage.chain(run_id, store), run["base_model"])
    assert "teacher SFT" in chain and "Distill" in chain


def test_an_rl_run_with_a_kl_penalty_logs_its_kl_to_the_base(home, default_model_ready):
    manager = RunManager()
    config = RLConfig(
        env="arithmetic",
        max_steps=2,
        groups_per_batch=2,
        group_size=4,
        max_tokens=12,
        kl_penalty_coef=0.1,
        num_eval_problems=0,
        save_every=0,
        eval_every=0,
    )
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=900)
    assert run["status"] == "completed", run.get("traceback")
    metrics = Store.default().get_metrics_wide(run_id).sort_values("step")
    trained = metrics.dropna(subset=["kl_policy_base"])
    if len(trained):  # a step whose groups all had equal rewards trains nothing and scores nothing
        first = trained.iloc[0]
        if first["step"] == 0:  # the policy is the base model until its first optimizer step
            # ~0 up to rounding: in bf16 (dtype=auto on a CPU with bf16 units) the sampler's log-probs and the
            # reference forward's differ by 0.002-0.003 nats a token on average (measured 2026-11-27, with either
            # sampling path); a KL of a trained policy is 0.1-0.4
            assert abs(first["kl_policy_base"]) < 5e-3
        assert (trained["kl_penalty_coef"] == 0.1).all()
