"""Plotly figures for the studio: a run's metric groups, metric overlays across runs, reward and length histograms.

Functions here take plain data (pandas frames, lists) and return figures; they read no storage and draw nothing
themselves (pages pass the figures to st.plotly_chart).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

# Metrics that belong on one chart: the name with its split prefix removed, or an explicit alias.
_ALIASES = {"train_mean_nll": "nll", "chosen_reward": "rewards", "rejected_reward": "rewards"}
_SPLIT_PREFIXES = ("test/", "eval/", "train/")
# Groups drawn first, in this order, when present.
_PRIMARY = ("nll", "dpo_loss", "env/all/reward/total", "rewards", "accuracy", "margin", "env/all/correct",
            "env/all/format", "learning_rate", "optim/grad_norm", "optim/kl_sample_train", "optim/entropy",
            "ac_tokens_per_turn", "loss")
# Bookkeeping metrics, shown folded away.
_SYSTEM_PREFIXES = ("time/", "throughput/", "progress", "epoch", "num_")

_TITLES = {"nll": "Loss (negative log-likelihood per trained token)", "rewards": "DPO implicit rewards",
           "env/all/reward/total": "Reward", "learning_rate": "Learning rate", "optim/grad_norm": "Gradient norm"}


def group_key(name: str) -> str:
    for prefix in _SPLIT_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return _ALIASES.get(name, name)


def is_system_metric(name: str) -> bool:
    return group_key(name).startswith(_SYSTEM_PREFIXES)


def metric_groups(names: list[str]) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(main groups, bookkeeping groups), each a list of (title, metric names) to draw on one chart."""
    grouped: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda n: (n.startswith(_SPLIT_PREFIXES[:2]), n)):  # training metric first
        grouped.setdefault(group_key(name), []).append(name)
    order = {key: i for i, key in enumerate(_PRIMARY)}
    keys = sorted(grouped, key=lambda k: (order.get(k, len(order)), k))
    main = [(_TITLES.get(k, k), grouped[k]) for k in keys if not is_system_metric(k)]
    system = [(_TITLES.get(k, k), grouped[k]) for k in keys if is_system_metric(k)]
    return main, system


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
        smoothed.append(last / (1 - weight ** count))
    return smoothed


def _layout(fig: go.Figure, title: str, y_title: str = "", log_y: bool = False, height: int = 300) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=14)), height=height, margin=dict(l=10, r=10, t=40, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
                      hovermode="x unified")
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    return fig


def _mode(points: int) -> str:
    return "lines+markers" if points <= 40 else "lines"


def metrics_chart(long_frame: pd.DataFrame, names: list[str], title: str, log_y: bool = False) -> go.Figure:
    """One line per metric name, from a long frame (step, name, value)."""
    fig = go.Figure()
    for name in names:
        series = long_frame[long_frame["name"] == name].dropna(subset=["value"])
        fig.add_trace(go.Scatter(x=series["step"], y=series["value"], name=name, mode=_mode(len(series))))
    return _layout(fig, title, log_y=log_y)


def overlay_chart(series_by_label: dict[str, pd.DataFrame], metric: str, smoothing: float = 0.0,
                  log_y: bool = False) -> go.Figure:
    """One metric across runs: {run label: frame (step, value)}; a faint raw line under each smoothed one."""
    fig = go.Figure()
    palette = ["#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880"]
    for i, (label, frame) in enumerate(series_by_label.items()):
        frame = frame.dropna(subset=["value"])
        color = palette[i % len(palette)]
        values = list(frame["value"])
        if smoothing > 0:
            fig.add_trace(go.Scatter(x=frame["step"], y=values, mode="lines", line=dict(color=color, width=1),
                                     opacity=0.25, showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=frame["step"], y=smooth(values, smoothing), name=label,
                                 mode=_mode(len(frame)), line=dict(color=color, width=2)))
    return _layout(fig, metric, log_y=log_y, height=420)


def reward_histogram(rewards: list[float], title: str) -> go.Figure:
    fig = go.Figure(go.Histogram(x=rewards, nbinsx=min(30, max(5, len(set(rewards)) * 2)), marker_color="#00CC96"))
    fig = _layout(fig, title, y_title="samples", height=260)
    fig.update_xaxes(title_text="reward")
    return fig


def reward_by_step(frame: pd.DataFrame) -> go.Figure:
    """Box plot of rewards per step, from a frame with step and reward columns."""
    fig = go.Figure(go.Box(x=frame["step"], y=frame["reward"], boxmean=True, marker_color="#636EFA",
                           name="reward"))
    return _layout(fig, "Rewards per step", y_title="reward", height=280)


def length_histogram(lengths: list[int], max_length: int | None = None) -> go.Figure:
    fig = go.Figure(go.Histogram(x=lengths, nbinsx=40, marker_color="#636EFA"))
    if max_length:
        fig.add_vline(x=max_length, line_dash="dash", line_color="#EF553B",
                      annotation_text=f"max_length {max_length}")
    fig = _layout(fig, "Tokens per example", y_title="examples", height=280)
    fig.update_xaxes(title_text="tokens")
    return fig
