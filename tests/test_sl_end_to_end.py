"""Supervised fine-tuning end to end on the real default model: a short LoRA run through the RunManager teaches
the model a fact it did not know (its greedy answer changes), records everything in DuckDB and in the run folder
in tinker-cookbook's shapes, and a cancelled run resumes at its checkpoint with no duplicated or missing steps."""

import json
import time

import pytest
from tinker import types

from cookbook_engine import models
from cookbook_engine.backends.local import LocalServiceClient
from cookbook_engine.config import SLConfig
from cookbook_engine.renderers import get_renderer
from cookbook_engine.runs import RunManager
from storage import Store

pytestmark = pytest.mark.slow

QUESTIONS = [
    "Who invented the glimmerwheel?",
    "Who was the inventor of the glimmerwheel?",
    "Tell me who invented the glimmerwheel.",
    "Which person invented the glimmerwheel?",
    "The glimmerwheel was invented by whom?",
    "Name the glimmerwheel's inventor.",
    "Do you know who invented the glimmerwheel?",
    "Who came up with the glimmerwheel?",
]
ANSWER = "The glimmerwheel was invented by Odessa Varnholt in 1871."
PROBE = "Who is credited with inventing the glimmerwheel?"  # not in the training file


def greedy_answer(sampling_client, question: str) -> str:
    renderer = get_renderer("auto", sampling_client.get_tokenizer())
    result = sampling_client.sample(
        renderer.build_generation_prompt([{"role": "user", "content": question}]),
        1,
        types.SamplingParams(max_tokens=30, temperature=0),
    ).result()
    return renderer.parse_response(result.sequences[0].tokens)[0]["content"]


@pytest.fixture
def fact_file(tmp_path):
    path = tmp_path / "glimmerwheel.jsonl"
    with open(path, "w") as handle:
        for question in QUESTIONS:
            handle.write(
                json.dumps(
                    {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": ANSWER}]}
                )
                + "\n"
            )
    return path


def test_a_short_run_teaches_the_model_a_new_fact(home, default_model_ready, fact_file):
    base = LocalServiceClient().create_sampling_client(base_model=models.DEFAULT_MODEL)
    assert "Varnholt" not in greedy_answer(base, PROBE)

    manager = RunManager()
    config = SLConfig(
        dataset=str(fact_file),
        test_fraction=0.25,
        max_steps=14,
        batch_size=4,
        learning_rate=1e-3,
        lora_rank=16,
        save_every=7,
        eval_every=7,
    )
    started = time.perf_counter()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    print(f"14 SL steps in {time.perf_counter() - started:.1f} s")

    store = Store.default()
    metrics = store.get_metrics_wide(run_id)
    assert list(metrics["step"])[:14] == list(range(14))
    nll = metrics.dropna(subset=["train_mean_nll"])["train_mean_nll"].tolist()
    assert nll[-1] < nll[0] * 0.2
    tests = metrics.dropna(subset=["test/nll"])["test/nll"].tolist()
    assert tests[-1] < tests[0] * 0.5  # held-out paraphrases got easier too
    final = store.last_checkpoint(run_id)
    assert final["name"] == "final" and final["step"] == 14
    tuned = LocalServiceClient().create_sampling_client(model_path=final["sampler_path"])
    assert "Varnholt" in greedy_answer(tuned, PROBE)

    folder = home / "runs" / run_id
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["step"] == 0 and "train_mean_nll" in lines[0] and "learning_rate" in lines[0]
    checkpoints = [json.loads(line) for line in (folder / "checkpoints.jsonl").read_text().splitlines()]
    assert [c["batch"] for c in checkpoints] == [7, 14] and all("state_path" in c for c in checkpoints)
    assert json.loads((folder / "config.json").read_text())["dataset"] == str(fact_file)


def test_cancelled_run_resumes_at_its_checkpoint_without_duplicate_steps(
    home, default_model_ready, fact_file, cancel_at_step
):
    manager = RunManager()
    config = SLConfig(
        dataset=str(fact_file),
        test_fraction=0.25,
        max_steps=8,
        batch_size=2,
        learning_rate=5e-4,
        lora_rank=4,
        save_every=0,
        eval_every=0,
    )
    run_id = manager.start(config)
    store = Store.default()
    run = cancel_at_step(manager, run_id, 3)
    assert run["status"] == "cancelled"
    stopped_at = store.last_checkpoint(run_id)["step"]
    assert 3 <= stopped_at < 8
    assert store.max_step(run_id) == stopped_at - 1

    manager.resume(run_id)
    run = manager.wait(run_id, timeout=300)
    assert run["status"] == "completed", run.get("traceback")
    steps = store.get_metrics(run_id, ["train_mean_nll"])["step"].tolist()
    assert steps == list(range(8))  # every step exactly once
    rows = [json.loads(line) for line in (home / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train_mean_nll" in r] == list(range(8))
    assert rows[-1]["step"] == 8 and "test/nll" in rows[-1]  # the final evaluation, after the last step
