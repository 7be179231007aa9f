"""Reinforcement learning (GRPO style): the loop (`loop.py`: prepare, plan, train), its measured settings
(`suggested.py`), environments (`envs.py`, `arithmetic.py`, `code_problems.py`), graders (`graders.py`,
`code_grading.py`), advantages, rollouts to datums (`data.py`), rollout metrics, reward-hack flags and the KL penalty
(`kl.py`). Not here: the frame every loop shares (cookbook_engine.training), the sandbox that runs code
(cookbook_engine.sandbox)."""
