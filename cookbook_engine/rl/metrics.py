"""Rollout metrics in tinker-cookbook's names (rl/metric_util.py): env/all/reward/total, env/all/correct,
env/all/format, env/all/ac_tokens_per_turn, env/all/by_group/frac_mixed, ... and env/<tag>/... per logging tag when
the tags split the groups (e.g. env/multiply/correct for the arithmetic env), and always for a mix's tasks (its envs'
names: env/arithmetic/correct, env/code/correct, for the envs in the batch). Aggregation only.
"""

from __future__ import annotations

from collections import defaultdict

from cookbook_engine.rl.types import RolloutGroup

GOOD_THRESHOLD = 0.5
# Per-rollout metric of code envs (1.0 when rl/hack_flags.py flagged the code), logged per step as its mean.
SUSPICIOUS_METRIC = "hack_flagged"
SUSPICIOUS_FRAC = "env/code/suspicious_frac"
# Per-rollout metric of text graders (1.0 when the reply hedged: several candidate answers, the right one among
# them; rl/text_graders.py), logged per step as its mean.
HEDGED_METRIC = "hedged"
HEDGED_FRAC = "env/text/hedged_frac"


def rollout_metrics(groups_P: list[RolloutGroup]) -> dict[str, float]:
    """env/all/... over every group, env/<tag>/... per tag when the tags split the groups, and a task's tag always."""
    if not groups_P:
        return {}
    by_tag: dict[str, list[RolloutGroup]] = defaultdict(list)
    for group in groups_P:
        for tag in group.tags:
            by_tag[tag].append(group)
    metrics: dict[str, float] = {}
    split = any(len(groups) < len(groups_P) for groups in by_tag.values())
    tasks = {group.task for group in groups_P}
    for tag, groups in sorted(by_tag.items()):
        if split or tag in tasks:
            metrics.update({f"env/{tag}/{key}": value for key, value in _metrics(groups).items()})
    metrics.update({f"env/all/{key}": value for key, value in _metrics(groups_P).items()})
    flags = [r.metrics[SUSPICIOUS_METRIC] for g in groups_P for r in g.rollouts_G if SUSPICIOUS_METRIC in r.metrics]
    if flags:
        metrics[SUSPICIOUS_FRAC] = sum(flags) / len(flags)
    hedged = [r.metrics[HEDGED_METRIC] for g in groups_P for r in g.rollouts_G if HEDGED_METRIC in r.metrics]
    if hedged:
        metrics[HEDGED_FRAC] = sum(hedged) / len(hedged)
    return metrics


def _metrics(groups_P: list[RolloutGroup]) -> dict[str, float]:
    rollouts = [rollout for group in groups_P for rollout in group.rollouts_G]
    metrics = {
        "ac_tokens_per_turn": sum(r.action_tokens for r in rollouts) / len(rollouts),
        "ob_tokens_per_turn": sum(len(r.prompt_tokens) for r in rollouts) / len(rollouts),
        "total_episodes": float(len(rollouts)),
        "total_ac_tokens": float(sum(r.action_tokens for r in rollouts)),
        "reward/total": sum(r.reward for r in rollouts) / len(rollouts),
        "frac_truncated": sum(r.stop_reason == "length" for r in rollouts) / len(rollouts),
    }
    values: dict[str, list[float]] = defaultdict(list)
    for rollout in rollouts:
        for key, value in rollout.metrics.items():
            if key not in (SUSPICIOUS_METRIC, HEDGED_METRIC):  # logged once, as SUSPICIOUS_FRAC / HEDGED_FRAC
                values[key].append(float(value))
    metrics.update({key: sum(vals) / len(vals) for key, vals in values.items()})
    mixed = good = bad = 0
    for group in groups_P:
        rewards = group.rewards_G
        if max(rewards) - min(rewards) > 1e-9:
            mixed += 1
        elif rewards[0] >= GOOD_THRESHOLD:
            good += 1
        else:
            bad += 1
    count = len(groups_P)
    metrics.update(
        {
            "by_group/frac_mixed": mixed / count,
            "by_group/frac_all_good": good / count,
            "by_group/frac_all_bad": bad / count,
        }
    )
    return metrics
