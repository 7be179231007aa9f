"""How a micro-batch's sequences are laid out as one packed row, with shared prompts run once.

An RL step trains each prompt's group of samples (8 replies to one problem) and a DPO pair trains two replies to one
prompt: those sequences begin with the same tokens, and their loss has no weight there. The packed row holds such a
prefix once; each sequence's own tokens follow it as a segment that attends to the prefix in full and to itself
causally, at the positions it has in the whole sequence. So a prefix's hidden states (and, where the sequences ask the
same targets of it, its log-probs) are computed once for the group, and the backward pass sums each sequence's
gradient through it: the numbers are those of running every sequence alone, up to float rounding
(tests/test_fast_paths.py). An RL step of 8 x 8 arithmetic samples runs about a third of the tokens it did.

A sequence shares only the leading positions the caller says carry no loss (`shared_D`: local.py gives the first
position whose log-prob the loss uses), and only with sequences whose tokens there are the same.

Not here: running the model over the row (fast_ops.packed_logprobs), attention over the segments
(fast_ops._packed_attention).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_SHARED = 8  # shorter common prefixes run per sequence: sharing them saves less than an extra attention call costs


@dataclass
class Segment:
    """Rows [start, end) of the packed row: causal over themselves, after the rows [context_start, context_end) of
    their shared prefix (an empty range: no prefix)."""

    start: int
    end: int
    context_start: int = 0
    context_end: int = 0


@dataclass
class Packing:
    ids: list[int]  # the packed row's tokens
    positions: list[int]  # each token's position in its own sequence
    segments: list[Segment]  # in row order, covering the row
    rows_D: list[torch.Tensor]  # per sequence: the row of each of its positions
    shared_D: list[int]  # per sequence: how many leading positions it shares with its group (0: none)
    leader_D: list[int]  # per sequence: the first sequence of its group (itself when it shares nothing)


def pack(inputs: list[list[int]], shared_D: list[int] | None = None) -> Packing:
    """The packed layout of these sequences; those whose first `shared_D[i]` tokens (at least MIN_SHARED, at most
    all but the last token) are the same tokens share them."""
    groups: dict[tuple[int, ...], list[int]] = {}  # shared tokens -> the sequences that begin with them
    for i, tokens in enumerate(inputs):
        key = shared_key(tokens, shared_D[i] if shared_D else 0) or (i,)  # (i,): alone, whatever it begins with
        groups.setdefault(key, []).append(i)

    layout = Packing([], [], [], [torch.empty(0)] * len(inputs), [0] * len(inputs), list(range(len(inputs))))
    for key, members in sorted(groups.items(), key=lambda item: item[1][0]):
        if len(members) == 1:
            i = members[0]
            start = _append(layout, inputs[i], 0)
            layout.segments.append(Segment(start, len(layout.ids)))
            layout.rows_D[i] = torch.arange(start, len(layout.ids))
            continue
        shared = len(key)
        prefix_start = _append(layout, list(key), 0)
        prefix_end = len(layout.ids)
        layout.segments.append(Segment(prefix_start, prefix_end))
        for i in members:
            start = _append(layout, inputs[i][shared:], shared)
            layout.segments.append(Segment(start, len(layout.ids), prefix_start, prefix_end))
            own_T = torch.arange(start, len(layout.ids))
            layout.rows_D[i] = torch.cat([torch.arange(prefix_start, prefix_end), own_T])
            layout.shared_D[i], layout.leader_D[i] = shared, members[0]
    return layout


def shared_key(tokens: list[int], shared: int) -> tuple[int, ...] | None:
    """The leading tokens a sequence may share (at least MIN_SHARED of them, at most all but its last), or None."""
    shared = min(shared, len(tokens) - 1)
    return tuple(tokens[:shared]) if shared >= MIN_SHARED else None


def _append(layout: Packing, tokens: list[int], first_position: int) -> int:
    start = len(layout.ids)
    layout.ids.extend(tokens)
    layout.positions.extend(range(first_position, first_position + len(tokens)))
    return start
