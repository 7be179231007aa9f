"""The Run page's logic without Streamlit: metric cards show the latest value and its change since the first step,
charts are grouped and laid out in rows, checkpoints become the table's rows, the log shows its last lines."""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from app import run_view


def long_frame(points: dict[str, list[float | None]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"step": step, "name": name, "value": float("nan") if value is None else value}
            for name, values in points.items()
            for step, value in enumerate(values)
        ]
    )


def test_cards_show_the_latest_value_and_the_change_since_the_first():
    metrics = long_frame(
        {"train_mean_nll": [2.0, 1.5, None], "learning_rate": [1e-3, 1e-3, 1e-3], "time/step": [1.0, 2.0, 3.0]}
    )
    assert run_view.metric_cards(metrics) == [
        run_view.MetricCard("Training loss (NLL)", "1.5", "-0.5", "train_mean_nll"),
        run_view.MetricCard("Learning rate", "0.001", None, "learning_rate"),
    ]


def test_charts_are_grouped_main_more_and_timing_and_laid_out_in_rows():
    layout = run_view.chart_layout(
        long_frame({"train_mean_nll": [1.0], "test/nll": [1.0], "time/step": [1.0], "env/add/reward": [0.0]})
    )
    assert [names for _, names in layout.main] == [["train_mean_nll", "test/nll"]]
    assert [names for _, names in layout.timing] == [["time/step"]]
    assert [names for _, names in layout.more] == [["env/add/reward"]]
    assert [len(row) for row in run_view.rows_of([("a", []), ("b", []), ("c", [])], 2)] == [2, 1]


def test_the_header_says_kind_model_backend_age_times_and_parent():
    run = {"base_model": "SmolLM2-135M-Instruct", "backend": "local", "parent_run_id": "sl-1"}
    assert run_view.header_facts(run, "SL", "just now", ["2 min"]) == [
        "SL",
        "SmolLM2-135M-Instruct",
        "backend local",
        "created just now",
        "2 min",
        "started from sl-1",
    ]


def test_checkpoints_become_table_rows_and_their_absence_says_when_they_come():
    saved = datetime(2026, 1, 1)
    rows = run_view.checkpoint_rows(
        [
            {
                "step": 4,
                "name": "final",
                "kind": "both",
                "loop_state": {"final": True},
                "created_at": saved,
                "state_path": "/s",
                "sampler_path": None,
            }
        ],
        age=lambda at: "at " + str(at.year),
    )
    assert rows == [
        {
            "Step": 4,
            "Name": "final",
            "Kind": "both",
            "Final": True,
            "Saved": "at 2026",
            "State path": "/s",
            "Sampler path": "",
        }
    ]
    assert run_view.no_checkpoints_text({"save_every": 20}) == (
        "No checkpoints yet (this run saves every 20 steps and at the end)."
    )
    assert run_view.no_checkpoints_text({}) == "No checkpoints yet (this run saves at the end)."


def test_the_log_tail_is_the_last_lines_or_nothing(tmp_path):
    assert run_view.log_tail(tmp_path) == []
    (tmp_path / "log.txt").write_text("\n".join(f"line {i}" for i in range(500)))
    tail = run_view.log_tail(tmp_path)
    assert len(tail) == 300 and tail[-1] == "line 499"


def test_every_metric_that_can_be_a_card_has_a_plain_name():
    """Issue 27 item 7: a card never shows a raw name such as `optim/kl_sample_train` as its title (the list comes
    from charts.CARD_METRICS, so a metric added there without a plain name fails here)."""
    from app import charts

    names = list(charts.CARD_METRICS)
    for start in range(0, len(names), 5):  # cards show at most five at a time
        chosen = names[start : start + 5]
        cards = run_view.metric_cards(long_frame({name: [1.0, 2.0] for name in chosen}))
        assert [card.raw_name for card in cards] == chosen
        assert all(card.name != card.raw_name and "/" not in card.name for card in cards), cards
    kl = run_view.metric_cards(long_frame({"optim/kl_sample_train": [0.0, 0.01]}))
    assert kl[0].name == "KL, sampler vs learner"
