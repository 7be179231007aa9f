"""The Transcripts page's logic without Streamlit: the reward filter keeps unrewarded samples, flags and network
warnings are counted from the grader's details, badges and captions say what the card shows, groups page by five."""

from __future__ import annotations

import pandas as pd

from app import transcripts_view as view


def rollouts(
    rewards: list[float | None],
    details: list[dict | None] | None = None,
    groups: list[int] | None = None,
) -> pd.DataFrame:
    count = len(rewards)
    mean = sum(r for r in rewards if r is not None) / max(1, sum(r is not None for r in rewards))
    return pd.DataFrame(
        {
            "step": [1] * count,
            "group_idx": groups or [0] * count,
            "sample_idx": list(range(count)),
            "prompt": ["Q"] * count,
            "completion": ["A"] * count,
            "reward": [float("nan") if r is None else r for r in rewards],
            "advantage": [float("nan") if r is None else r - mean for r in rewards],
            "stop_reason": ["stop"] * count,
            "metrics": details or [{} for _ in rewards],
        }
    )


def test_only_rl_and_distillation_runs_have_transcripts():
    runs = [{"run_id": "a", "kind": "sl"}, {"run_id": "b", "kind": "rl"}, {"run_id": "c", "kind": "dpo"}]
    runs.append({"run_id": "d", "kind": "distill"})
    assert [run["run_id"] for run in view.rl_runs(runs)] == ["b", "d"]


def test_the_reward_filter_keeps_samples_without_a_reward():
    frame = rollouts([0.0, 0.5, 1.0, None])
    assert view.reward_bounds(frame) == (0.0, 1.0)
    assert view.in_reward_range(frame, (0.5, 1.0))["sample_idx"].tolist() == [1, 2, 3]
    assert view.reward_bounds(rollouts([None])) == (0.0, 0.0)


def test_flags_and_unisolated_samples_are_counted_from_the_graders_details():
    frame = rollouts(
        [1.0, 0.0, 0.0],
        details=[{"suspicious": ["gc"], "network_isolated": False}, {"network_isolated": True}, {"suspicious": []}],
    )
    assert view.flagged_count(frame) == 1 and view.only_flagged(frame)["sample_idx"].tolist() == [0]
    assert view.unisolated_count(frame) == 1
    assert view.hack_flags("not a dict") == [] and not view.network_exposed(None)


def test_the_step_summary_counts_samples_groups_mean_reward_and_correct_share():
    frame = rollouts(
        [1.0, 0.0, None, 1.0],
        details=[{"correct": True}, {"correct": False}, {}, {"correct": True}],
        groups=[0, 0, 1, 1],
    )
    assert view.step_summary(frame) == view.StepSummary(samples=4, groups=2, mean_reward=2 / 3, correct_share=2 / 3)
    assert view.step_summary(rollouts([None])).mean_reward is None


def test_a_cards_badges_and_caption_say_reward_advantage_flags_and_answer():
    frame = rollouts(
        [1.0, 0.0], details=[{"answer": 42, "found": 42}, {"suspicious": ["sys.modules"], "network_isolated": False}]
    )
    first, second = (row for _, row in frame.iterrows())
    assert view.sample_badges(first) == ":blue-badge[reward 1] :green-badge[advantage +0.5]"
    assert view.sample_badges(second) == (
        ":blue-badge[reward 0] :red-badge[advantage -0.5] "
        ":orange-badge[:material/warning: network not isolated] "
        ":red-badge[:material/flag: possible reward hack]"
    )
    assert view.sample_facts(first) == "sample 0 · stopped: stop · expected 42 · found 42"
    assert view.sample_facts(second) == "sample 1 · code touches: sys.modules · stopped: stop"
    assert view.sample_badges(rollouts([None]).iloc[0]) == ":blue-badge[reward —] :gray-badge[advantage —]"


def test_sandbox_output_is_split_from_other_per_sample_metrics():
    sandbox, other = view.split_details(
        {"tests_passed": 2, "tests_total": 3, "failures": {"1": "AssertionError"}, "format": 1.0}
    )
    assert other == {"format": 1.0}
    assert view.tests_passed_text(sandbox) == "tests passed: 2/3"
    assert view.failures_text(sandbox) == "test 1: AssertionError"
    assert view.split_details(None) == ({}, {}) and view.tests_passed_text({}) is None
    # an arithmetic reply ran no code: its grader's note is a per-sample detail, not "Sandbox output"
    hedge = {"answer": 118, "found": None, "hedged": True, "error": "no single committed number (2 candidates)"}
    assert view.split_details(hedge) == ({}, hedge)
    row = rollouts([-0.1], details=[hedge]).iloc[0]
    assert view.sample_facts(row) == (
        "sample 0 · hedged answer: the right one among several candidates · stopped: stop · expected 118 · found None"
    )


def test_groups_page_by_five_and_show_four_samples_a_row():
    frame = rollouts([1.0] * 12 + [0.5] * 6, groups=[group for group in range(6) for _ in range(3)])
    assert view.page_count(list(frame["group_idx"].unique())) == 2
    second_page = view.groups_on_page(frame, 2)
    assert [members["group_idx"].iloc[0] for members in second_page] == [5]
    assert view.group_heading(second_page[0]) == "**Group 5** · 3 samples · mean reward 0.5"
    big_group = rollouts([1.0] * 6, details=[{"group_dropped": True}] * 6)
    assert [len(row) for row in view.rows_of(big_group)] == [4, 2]
    assert view.group_heading(big_group).endswith("· not trained on (every sample got the same reward)")
