"""Plotly figures for the studio: a run's metric groups, metric overlays across runs, reward and length histograms.

Functions here take plain data (pandas frames, lists) and return figures; they read no storage and draw nothing
themselves (pages pass the figures to st.plotly_chart).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

# Metrics that belong on one chart: the name with its split prefix removed, or an explicit alias.
_ALIASES = {
    "train_mean_nll": "nll",
    "chosen_reward": "rewards",
    "rejected_reward": "rewards",
    "optim/lr": "learning_rate",
    "env/all/format": "env/all/correct",
    "frac_groups_dropped": "groups",
    "env/all/by_group/frac_all_good": "groups",
    "env/all/by_group/frac_all_bad": "groups",
    "env/all/by_group/frac_mixed": "groups",
    "optim/entropy": "optim/kl_sample_train",
    "distill/teacher_logprob": "distill/logprobs",
    "distill/student_logprob": "distill/logprobs",
}
_SPLIT_PREFIXES = ("test/", "eval/", "train/")
# The charts shown (in this order) when present; every other metric is folded away under "More metrics".
_PRIMARY = (
    "nll",
    "dpo_loss",
    "env/all/reward/total",
    "teacher_kl",
    "distill/logprobs",
    "kl_policy_base",
    "rewards",
    "accuracy",
    "margin",
    "chosen_nll",
    "env/all/correct",
    "by_task/correct",
    "groups",
    "optim/kl_sample_train",
    "env/all/ac_tokens_per_turn",
    "env/all/frac_truncated",
    "optim/loss_sum",
    "loss",
    "learning_rate",
    "optim/grad_norm",
)
_TIMING_PREFIXES = ("time/", "throughput/", "progress")

_TITLES = {
    "nll": "Loss (negative log-likelihood per trained token)",
    "rewards": "DPO implicit rewards",
    "env/all/reward/total": "Reward (mean per sample)",
    "learning_rate": "Learning rate",
    "optim/grad_norm": "Gradient norm",
    "env/all/correct": "Correct and well-formatted (share of samples)",
    "by_task/correct": "Correct, by task",
    "groups": "Groups: all right, all wrong, mixed, dropped (share)",
    "optim/kl_sample_train": "KL (sampler vs trainer) and entropy",
    "optim/loss_sum": "Loss (summed)",
    "env/all/ac_tokens_per_turn": "Tokens per reply",
    "env/all/frac_truncated": "Replies cut at max_tokens",
    "teacher_kl": "KL to the teacher per token (on-policy: reverse, on the student's replies; prompt distillation: "
    "on the teacher's; falls as the student learns)",
    "distill/logprobs": "Log-prob per token of the replies trained on: teacher and student",
    "kl_policy_base": "KL to the reference (per token; the KL penalty holds it down)",
    "chosen_nll": "Chosen replies' loss per token (rpo_alpha holds it down; plain DPO lets it rise)",
}


def group_key(name: str) -> str:
    for prefix in _SPLIT_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name.startswith("env/") and not name.startswith("env/all/") and name.endswith("/correct"):
        return "by_task/correct"  # env/add/correct, env/multiply/correct, ... on one chart
    return _ALIASES.get(name, name)


def is_timing_metric(name: str) -> bool:
    return group_key(name).startswith(_TIMING_PREFIXES)


def metric_groups(
    names: list[str],
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(main charts, more metrics, timing), each a list of (title, metric names) to draw on one chart. The main
    charts are the few a person reads a run by; per-operation counts and per-task details go under "more"."""
    grouped: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda n: (n.startswith(_SPLIT_PREFIXES[:2]), n)):  # training metric first
        grouped.setdefault(group_key(name), []).append(name)
    order = {key: i for i, key in enumerate(_PRIMARY)}
    keys = sorted(grouped, key=lambda k: (order.get(k, len(order)), k))
    main = [(_TITLES.get(k, k), grouped[k]) for k in keys if k in order]
    timing = [(_TITLES.get(k, k), grouped[k]) for k in keys if k not in order and is_timing_metric(k)]
    more = [(_TITLES.get(k, k), grouped[k]) for k in keys if k not in order and not is_timing_metric(k)]
    return main, more, timing


def smooth(values: list[float], weight: float) -> list[float]:
    """TensorBoard's debiased exponential moving average; weight 0 leaves the values as they are."""
    if weight <= 0:
        return list(values)
    smoothed, last, count = [], 0.0, 0
    for value in values:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            smoothed.append(value)
            continue
        count += 1
        last = last * weight + (1 - weight) * value
        smoothed.append(last / (1 - weight**count))
    return smoothed


STEP_AXIS = "step (0 = the first)"  # metrics are logged by step index; progress counts steps done


def _layout(fig: go.Figure, title: str, y_title: str = "", log_y: bool = False, height: int = 300) -> go.Figure:
    fig.update_layout(
        title=dict(text=title, font=dict(size=14)),
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0),  # under the axis
        hovermode="x unified",
    )
    fig.update_xaxes(title_text=STEP_AXIS)
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    return fig


def _mode(points: int) -> str:
    return "lines+markers" if points <= 40 else "lines"


def _whole_steps(fig: go.Figure, last_step: float) -> go.Figure:
    """Step ticks on whole numbers (no 0.2, 0.4, ... on a short run)."""
    fig.update_xaxes(tick0=0, dtick=max(1, math.ceil((last_step + 1) / 8)))
    return fig


def metrics_chart(long_frame: pd.DataFrame, names: list[str], title: str, log_y: bool = False) -> go.Figure:
    """One line per metric name, from a long frame (step, name, value)."""
    fig = go.Figure()
    for name in names:
        series = long_frame[long_frame["name"] == name].dropna(subset=["value"])
        fig.add_trace(go.Scatter(x=series["step"], y=series["value"], name=name, mode=_mode(len(series))))
    fig = _whole_steps(_layout(fig, title, log_y=log_y), long_frame["step"].max() if len(long_frame) else 0)
    values = long_frame[long_frame["name"].isin(names)]["value"].dropna()
    if len(values) and values.min() == values.max() and not log_y:
        _around(fig, float(values.iloc[0]))
    return fig


def _around(fig: go.Figure, value: float) -> None:
    """A flat line's axis: centred on its value, with ticks that show it (plotly's own range for a constant
    0.0005 runs -0.5..1, where the line reads as 0)."""
    half = abs(value) * 0.5 or 1.0
    fig.update_yaxes(range=[value - half, value + half], tickformat=".3~g")


# The figures on the run page's metric cards, in this order of preference (the first five present are shown).
CARD_METRICS = (
    "teacher_kl",
    "train_mean_nll",
    "test/nll",
    "dpo_loss",
    "accuracy",
    "margin",
    "env/all/reward/total",
    "env/all/correct",
    "test/env/all/correct",
    "env/all/format",
    "optim/kl_sample_train",
    "kl_policy_base",
    "env/all/ac_tokens_per_turn",
    "learning_rate",
    "optim/lr",
)


def card_metrics(names: list[str]) -> list[str]:
    return [name for name in CARD_METRICS if name in names][:5]


def overlay_chart(
    series_by_label: dict[str, pd.DataFrame], metric: str, smoothing: float = 0.0, log_y: bool = False
) -> go.Figure:
    """One metric across runs: {run label: frame (step, value)}; a faint raw line under each smoothed one."""
    fig = go.Figure()
    palette = ["#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880"]
    for i, (label, frame) in enumerate(series_by_label.items()):
        frame = frame.dropna(subset=["value"])
        color = palette[i % len(palette)]
        values = list(frame["value"])
        if smoothing > 0:
            fig.add_trace(
                go.Scatter(
                    x=frame["step"],
                    y=values,
                    mode="lines",
                    line=dict(color=color, width=1),
                    opacity=0.25,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=frame["step"],
                y=smooth(values, smoothing),
                name=label,
                mode=_mode(len(frame)),
                line=dict(color=color, width=2),
            )
        )
    last = max((frame["step"].max() for frame in series_by_label.values() if len(frame)), default=0)
    return _whole_steps(_layout(fig, metric, log_y=log_y, height=420), last)


def reward_counts(rewards: list[float], max_distinct: int = 12, bins: int = 20) -> tuple[list[float], list[int], float]:
    """(bar centres, sample counts, bar width): one bar per distinct reward when there are few (0/1 rewards are two
    bars), else equal-width bins over the whole range. The counts add up to len(rewards): every sample is drawn."""
    values = [float(r) for r in rewards]
    distinct = sorted(set(values))
    if len(distinct) <= max_distinct:
        gaps = [b - a for a, b in zip(distinct, distinct[1:])]
        return distinct, [values.count(v) for v in distinct], 0.8 * min(gaps) if gaps else 0.5
    low, high = distinct[0], distinct[-1]
    width = (high - low) / bins
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / width))] += 1
    return [low + width * (i + 0.5) for i in range(bins)], counts, width


def reward_histogram(rewards: list[float], title: str) -> go.Figure:
    centres, counts, width = reward_counts(rewards)
    fig = go.Figure(
        go.Bar(
            x=centres,
            y=counts,
            width=width,
            marker_color="#00CC96",
            text=counts,
            textposition="outside",
            hovertemplate="reward %{x:.3g}: %{y} samples<extra></extra>",
        )
    )
    fig = _layout(fig, title, y_title="samples", height=260)
    fig.update_xaxes(title_text="reward")
    fig.update_yaxes(range=[0, max(counts) * 1.25])
    return fig


def reward_by_step(frame: pd.DataFrame) -> go.Figure:
    """Box plot of rewards per step, from a frame with step and reward columns."""
    fig = go.Figure(go.Box(x=frame["step"], y=frame["reward"], boxmean=True, marker_color="#636EFA", name="reward"))
    return _layout(fig, "Rewards per step", y_title="reward", height=280)


def length_histogram(lengths: list[int], max_length: int | None = None) -> go.Figure:
    fig = go.Figure(go.Histogram(x=lengths, nbinsx=40, marker_color="#636EFA"))
    if max_length:
        fig.add_vline(x=max_length, line_dash="dash", line_color="#EF553B", annotation_text=f"max_length {max_length}")
    fig = _layout(fig, "Tokens per example", y_title="examples", height=280)
    fig.update_xaxes(title_text="tokens")
    return fig
