"""What the Transcripts page shows, computed without Streamlit: which runs have transcripts, the reward filter,
the task filter of a mix of envs, the step's summary numbers, a sample's badges, facts and sandbox output, and groups
split into pages and rows.

The page (pages/transcripts.py) only lays these out as widgets. Rows are the frames `RunStore.get_transcripts`
returns (one row per sample; `metrics` holds the grader's per-sample details as a dict). Not here: reading storage
or drawing anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from cookbook_engine.data import mix
from cookbook_engine.rl import envs

SANDBOX_KEYS = (
    "tests_passed",
    "tests_total",
    "failures",
    "solution_error",
    "printed",
    "stderr",
    "sandbox_error",
    "error",
    "network_isolated",
    "suspicious",
)
RAN_CODE_KEYS = ("tests_total", "solution_error", "sandbox_error", "network_isolated", "suspicious", "printed")
SANDBOX_TEXT_KEYS = ("printed", "stderr", "solution_error", "sandbox_error", "error")
TABLE_COLUMNS = ["group_idx", "sample_idx", "reward", "advantage", "stop_reason", "prompt", "completion"]
GROUPS_PER_PAGE = 5
SAMPLES_PER_ROW = 4


ALL_TASKS = "All"  # the Task filter's first choice: every env of a mix

TRANSCRIPT_KINDS = ("rl", "distill")  # RL's rollouts; distillation's student (on-policy) or teacher (prompt) replies


def rl_runs(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs that record transcripts (RL and distillation runs), in the order given."""
    return [run for run in runs if run["kind"] in TRANSCRIPT_KINDS]


def run_tasks(run: dict[str, Any]) -> list[str]:
    """The envs of an RL run over a mix of envs (env=arithmetic:2,code:1), in the mix's order; [] for one env."""
    env = (run.get("config") or {}).get("env") or ""
    return envs.env_names(env) if run["kind"] == "rl" and mix.is_mix(env) else []


def of_task(rollouts_df: pd.DataFrame, task: str) -> pd.DataFrame:
    """The samples of one env of a mix (their row's `task`); every sample for ALL_TASKS."""
    if task == ALL_TASKS:
        return rollouts_df
    return rollouts_df[[isinstance(d, dict) and d.get("task") == task for d in rollouts_df["metrics"]]]


HEDGED_FLAG = "hedged answer"


def hack_flags(details: Any) -> list[str]:
    """The reward-hacking patterns the grader found in the sample's code (rl/hack_flags.py), and "hedged answer" when
    a text grader found several candidate answers with the right one among them (rl/text_graders.py)."""
    if not isinstance(details, dict):
        return []
    return list(details.get("suspicious") or []) + ([HEDGED_FLAG] if details.get("hedged") else [])


def network_exposed(details: Any) -> bool:
    """The sample's code ran in a sandbox that could not isolate the network."""
    return isinstance(details, dict) and "network_isolated" in details and not details["network_isolated"]


def reward_bounds(rollouts_df: pd.DataFrame) -> tuple[float, float]:
    """The lowest and highest reward at the step, (0, 0) when no sample has one."""
    rewards = rollouts_df["reward"].dropna()
    return (float(rewards.min()), float(rewards.max())) if len(rewards) else (0.0, 0.0)


def in_reward_range(rollouts_df: pd.DataFrame, reward_range: tuple[float, float]) -> pd.DataFrame:
    """The samples with a reward in the inclusive range, and those without a reward."""
    return rollouts_df[rollouts_df["reward"].isna() | rollouts_df["reward"].between(*reward_range)]


def flagged_count(rollouts_df: pd.DataFrame) -> int:
    """How many samples the grader flagged as possible reward hacks."""
    return int(sum(bool(hack_flags(details)) for details in rollouts_df["metrics"]))


def only_flagged(rollouts_df: pd.DataFrame) -> pd.DataFrame:
    return rollouts_df[[bool(hack_flags(details)) for details in rollouts_df["metrics"]]]


def unisolated_count(rollouts_df: pd.DataFrame) -> int:
    """How many samples ran their code without network isolation."""
    return sum(network_exposed(details) for details in rollouts_df["metrics"])


@dataclass(frozen=True)
class StepSummary:
    """The numbers above a step's samples."""

    samples: int
    groups: int
    mean_reward: float | None  # None when no sample has a reward
    correct_share: float | None  # None when the grader marked none correct or wrong


def step_summary(rollouts_df: pd.DataFrame) -> StepSummary:
    rewards = rollouts_df["reward"].dropna()
    correct: list[float] = [
        float(details["correct"])
        for details in rollouts_df["metrics"]
        if isinstance(details, dict) and details.get("correct") is not None
    ]
    return StepSummary(
        samples=len(rollouts_df),
        groups=int(rollouts_df["group_idx"].nunique()),
        mean_reward=float(rewards.mean()) if len(rewards) else None,
        correct_share=sum(correct) / len(correct) if correct else None,
    )


def _missing(value: Any) -> bool:
    return value is None or bool(pd.isna(value))


def sample_badges(row: pd.Series) -> str:
    """The markdown badges on a sample's card: reward, advantage (green above zero, red below) and warnings."""
    reward = "—" if _missing(row["reward"]) else f"{row['reward']:.3g}"
    advantage = row["advantage"]
    advantage_text = "—" if _missing(advantage) else f"{advantage:+.3g}"
    color = "gray" if _missing(advantage) or advantage == 0 else ("green" if advantage > 0 else "red")
    details = row["metrics"] or {}
    badges = [f":blue-badge[reward {reward}]", f":{color}-badge[advantage {advantage_text}]"]
    if network_exposed(details):
        badges.append(":orange-badge[:material/warning: network not isolated]")
    if hack_flags(details):
        badges.append(":red-badge[:material/flag: possible reward hack]")
    return " ".join(badges)


def sample_facts(row: pd.Series) -> str:
    """'sample 2 · stopped: stop · expected 42 · found 41': the caption under a sample's badges."""
    details = row["metrics"] or {}
    facts = [f"sample {row['sample_idx']}"]
    if details.get("suspicious"):
        facts.append("code touches: " + ", ".join(details["suspicious"]))
    if details.get("hedged"):
        facts.append(f"{HEDGED_FLAG}: the right one among several candidates")
    if row["stop_reason"]:
        facts.append(f"stopped: {row['stop_reason']}")
    if "answer" in details:
        facts.append(f"expected {details['answer']}")
    if "found" in details:
        facts.append(f"found {details['found']}")
    return " · ".join(str(fact) for fact in facts)


def turn_lines(details: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A multi-turn episode's turns as (who, text): each reply of the model and what its tool call got back."""
    lines: list[tuple[str, str]] = []
    for number, turn in enumerate((details or {}).get("turns") or [], start=1):
        lines.append((f"turn {number}: model", str(turn.get("reply", ""))))
        if "result" in turn:
            lines.append((f"turn {number}: <{turn.get('tool', '')}> returned", str(turn["result"])))
    return lines


def split_details(details: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sample's details as (sandbox output, other per-sample metrics); a sample whose reply ran no code (a text
    grader's: arithmetic, custom numeric) has no sandbox output, its grader's note ("error") is among the rest."""
    details = details or {}
    ran_code = any(key in details for key in RAN_CODE_KEYS)
    sandbox = {key: details[key] for key in SANDBOX_KEYS if key in details and ran_code}
    return sandbox, {key: value for key, value in details.items() if key not in sandbox and key != "turns"}


def tests_passed_text(sandbox: dict[str, Any]) -> str | None:
    if "tests_total" not in sandbox:
        return None
    return f"tests passed: {int(sandbox.get('tests_passed', 0))}/{int(sandbox['tests_total'])}"


def failures_text(sandbox: dict[str, Any]) -> str | None:
    failures = sandbox.get("failures")
    return "\n".join(f"test {name}: {why}" for name, why in failures.items()) if failures else None


def page_count(groups: list[Any], per_page: int = GROUPS_PER_PAGE) -> int:
    return max(1, (len(groups) + per_page - 1) // per_page)


def groups_on_page(shown_df: pd.DataFrame, page: int, per_page: int = GROUPS_PER_PAGE) -> list[pd.DataFrame]:
    """The groups on page `page` (from 1), each as its samples sorted by sample index."""
    groups = sorted(shown_df["group_idx"].unique())
    return [
        shown_df[shown_df["group_idx"] == group].sort_values("sample_idx")
        for group in groups[(page - 1) * per_page : page * per_page]
    ]


def group_heading(members_df: pd.DataFrame) -> str:
    """'**Group 3** · 4 samples · mean reward 0.5' (+ why it was not trained on when it was dropped)."""
    rewards = members_df["reward"].dropna()
    dropped = bool((members_df.iloc[0]["metrics"] or {}).get("group_dropped"))
    return (
        f"**Group {members_df.iloc[0]['group_idx']}** · {len(members_df)} samples · mean reward "
        f"{f'{rewards.mean():.4g}' if len(rewards) else '—'}"
        + (" · not trained on (every sample got the same reward)" if dropped else "")
    )


def rows_of(members_df: pd.DataFrame, per_row: int = SAMPLES_PER_ROW) -> list[pd.DataFrame]:
    return [members_df.iloc[i : i + per_row] for i in range(0, len(members_df), per_row)]
