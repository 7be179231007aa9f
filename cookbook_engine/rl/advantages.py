"""GRPO-style advantages, as tinker-cookbook computes them: each sample's reward minus its group's mean reward.

No division by the group's standard deviation (the cookbook's default). A group whose rewards are all equal carries
no signal (every advantage is 0), so it is dropped before training and counted. Math only: no tokens, no datums.
"""

from __future__ import annotations

CONSTANT_TOLERANCE = 1e-9


def centered_advantages(rewards_G: list[float]) -> list[float]:
    """reward - mean(rewards) for each member of a group."""
    if not rewards_G:
        raise ValueError("centered_advantages: empty group")
    mean = sum(rewards_G) / len(rewards_G)
    return [reward - mean for reward in rewards_G]


def is_constant(rewards_G: list[float]) -> bool:
    """True when every reward of the group is the same (so every advantage would be 0)."""
    return max(rewards_G) - min(rewards_G) <= CONSTANT_TOLERANCE
