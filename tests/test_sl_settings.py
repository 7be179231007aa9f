"""The supervised loop's settings do what they say: the learning-rate schedules, epochs against max_steps, and
max_length (over-long examples truncated or dropped, with the counts in the summary the CLI and studio show);
a short real run logs the scheduled learning rate and the batch's token count at every step."""

import json
import math

import pytest

from cookbook_engine.config import SLConfig
from cookbook_engine.runs import RunManager
from cookbook_engine.sl import loop as supervised
from cookbook_engine.training.common import lr_multiplier
from storage import Store


def test_schedules_decay_as_the_cookbook_defines_them():
    assert [lr_multiplier("constant", s, 4) for s in range(4)] == [1.0, 1.0, 1.0, 1.0]
    assert [lr_multiplier("linear", s, 4) for s in range(4)] == [1.0, 0.75, 0.5, 0.25]
    cosine = [lr_multiplier("cosine", s, 4) for s in range(4)]
    assert cosine == pytest.approx([1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))])
    with pytest.raises(ValueError, match="lr_schedule 'step' is unknown"):
        lr_multiplier("step", 0, 4)


def test_epochs_and_max_steps_plan_the_number_of_steps():
    assert supervised.plan_steps(SLConfig(batch_size=4, num_epochs=1), 10) == (2, 2)
    assert supervised.plan_steps(SLConfig(batch_size=4, num_epochs=3), 10) == (2, 6)
    assert supervised.plan_steps(SLConfig(batch_size=4, num_epochs=3, max_steps=5), 10) == (2, 5)
    assert supervised.plan_steps(SLConfig(batch_size=4, max_steps=7), 10) == (2, 7)  # one epoch: max_steps wins
    # a resumed run replays the same batches: the order of an epoch depends only on the seed and the epoch
    config = SLConfig(batch_size=2, seed=3)
    data = list(range(6))
    assert supervised.batch_at(data, config, 4, 3) == supervised.batch_at(data, config, 4, 3)
    assert sorted(sum((supervised.batch_at(data, config, s, 3) for s in range(3)), [])) == data


@pytest.fixture
def mixed_lengths(tmp_path):
    """Four short conversations and two long ones (a reply of ~200 tokens)."""
    path = tmp_path / "mixed.jsonl"
    rows = [{"prompt": f"Say {i}.", "completion": f"{i}."} for i in range(4)]
    rows += [{"prompt": "Count.", "completion": " ".join(str(n) for n in range(100))} for _ in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_over_long_examples_are_truncated_or_dropped_and_counted(default_model_ready, mixed_lengths):
    truncated = supervised.prepare(SLConfig(dataset=mixed_lengths, test_fraction=0, max_length=64))
    assert (len(truncated.train), truncated.truncated, truncated.dropped) == (6, 2, 0)
    assert max(d.model_input.length for d in truncated.train) == 63  # the model input is tokens[:-1]
    assert "2 over-long examples truncated" in truncated.summary()

    dropped = supervised.prepare(SLConfig(dataset=mixed_lengths, test_fraction=0, max_length=64, overlong="drop"))
    assert (len(dropped.train), dropped.truncated, dropped.dropped) == (4, 0, 2)
    assert "2 over-long examples dropped" in dropped.summary()


@pytest.mark.slow
def test_a_run_logs_the_scheduled_learning_rate_and_its_tokens(home, default_model_ready, mixed_lengths):
    config = SLConfig(
        dataset=mixed_lengths,
        test_fraction=0,
        max_length=64,
        batch_size=2,
        max_steps=4,
        learning_rate=1e-3,
        lr_schedule="cosine",
        lora_rank=4,
        save_every=0,
        eval_every=0,
    )
    prepared = supervised.prepare(config)
    manager = RunManager()
    run_id = manager.start(config, prepared=prepared)
    run = manager.wait(run_id, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    metrics = Store.default().get_metrics_wide(run_id).set_index("step")
    assert metrics["learning_rate"].tolist() == pytest.approx([1e-3 * lr_multiplier("cosine", s, 4) for s in range(4)])
    batches_per_epoch, _ = supervised.plan_steps(config, len(prepared.train))
    for step in range(4):
        batch = supervised.batch_at(prepared.train, config, step, batches_per_epoch)
        assert metrics.loc[step, "num_tokens"] == sum(d.model_input.length for d in batch)
        assert metrics.loc[step, "time/step"] > 0 and metrics.loc[step, "throughput/tokens_per_s"] > 0
