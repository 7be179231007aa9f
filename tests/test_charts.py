"""The run page's charts: an RL run reads as a few charts (the rest folded away), and the Transcripts reward
histogram draws every sample. Fast: figures and groupings from plain data, no model."""

from __future__ import annotations

from app import charts

RL_METRICS = [
    f"env/{tag}/{name}"
    for tag in ("all", "add", "subtract")
    for name in (
        "ac_tokens_per_turn",
        "by_group/frac_all_bad",
        "by_group/frac_all_good",
        "by_group/frac_mixed",
        "correct",
        "format",
        "frac_truncated",
        "ob_tokens_per_turn",
        "reward/total",
        "total_ac_tokens",
        "total_episodes",
    )
] + [
    "frac_groups_dropped",
    "num_groups_dropped",
    "optim/entropy",
    "optim/grad_norm",
    "optim/kl_sample_train",
    "optim/loss_sum",
    "optim/lr",
    "optim/num_datums",
    "optim/num_forward_backward",
    "optim/num_substeps",
    "optim/num_tokens",
    "progress",
    "test/env/add/correct",
    "test/env/all/correct",
    "test/env/all/format",
    "test/env/all/reward/total",
    "test/env/all/ac_tokens_per_turn",
    "time/eval",
    "time/sample",
    "time/total",
    "time/train",
]  # what an RL run on the arithmetic env logs


def test_an_rl_run_reads_as_a_few_charts_and_every_metric_has_one_place():
    main, more, timing = charts.metric_groups(RL_METRICS)
    titles = [title for title, _ in main]
    assert len(main) <= 12 and titles[0] == "Reward (mean per sample)"
    assert dict(main)["Reward (mean per sample)"] == ["env/all/reward/total", "test/env/all/reward/total"]
    assert set(dict(main)["Correct, by task"]) == {"env/add/correct", "env/subtract/correct", "test/env/add/correct"}
    placed = [name for groups in (main, more, timing) for _, names in groups for name in names]
    assert sorted(placed) == sorted(RL_METRICS)  # each metric drawn exactly once
    assert {name for _, names in timing for name in names} == {
        "progress",
        "time/eval",
        "time/sample",
        "time/total",
        "time/train",
    }
    assert not any(name.startswith("optim/num_") for _, names in main for name in names)


def test_reward_histogram_draws_every_sample_with_0_1_rewards_and_with_many_values():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.1, 1.0, 0.0, 0.0]
    bar = charts.reward_histogram(rewards, "Rewards at step 3").data[0]
    assert sum(bar.y) == len(rewards) and list(bar.x) == [0.0, 0.1, 1.0] and list(bar.y) == [4, 1, 3]
    spread = [i / 37 for i in range(50)]
    centres, counts, _ = charts.reward_counts(spread)
    assert sum(counts) == 50 and min(centres) > 0 and max(centres) < max(spread)
