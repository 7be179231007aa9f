"""GRPO-style advantages: each sample's reward minus its group's mean reward, as tinker-cookbook computes them, and
optionally divided by the group's standard deviation, as GRPO's paper (DeepSeekMath) and TRL's `scale_rewards="group"`
do.

`scale_rewards="none"` is the cookbook's way. "group" gives a group where one sample of eight was right (or wrong)
more weight beside one split four to four: its rare reply's advantage is 2.6 instead of 0.875, against 1 instead of
0.5. A group whose rewards are all equal carries no signal either way (every advantage is 0), so it is dropped before
training and counted. Math only: no tokens, no datums.
"""

from __future__ import annotations

CONSTANT_TOLERANCE = 1e-9
SCALE_REWARDS = ("none", "group")  # the choices of RLConfig.scale_rewards
STD_EPSILON = 1e-6  # added to a group's standard deviation before dividing by it (GRPO's epsilon)


def centered_advantages(rewards_G: list[float]) -> list[float]:
    """reward - mean(rewards) for each member of a group."""
    if not rewards_G:
        raise ValueError("centered_advantages: empty group")
    mean = sum(rewards_G) / len(rewards_G)
    return [reward - mean for reward in rewards_G]


def group_advantages(rewards_G: list[float], scale_rewards: str) -> list[float]:
    """The advantages a group trains with: centered, and with scale_rewards="group" divided by the rewards'
    (population) standard deviation plus STD_EPSILON."""
    centered = centered_advantages(rewards_G)
    if scale_rewards == "none":
        return centered
    if scale_rewards == "group":
        std = (sum(advantage * advantage for advantage in centered) / len(centered)) ** 0.5
        return [advantage / (std + STD_EPSILON) for advantage in centered]
    raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}, got {scale_rewards!r}")


def is_constant(rewards_G: list[float]) -> bool:
    """True when every reward of the group is the same (so every advantage would be 0)."""
    return max(rewards_G) - min(rewards_G) <= CONSTANT_TOLERANCE
