"""Sampling records for `stable_reinforce`, and the provenance checks that tie a training datum to them.

A sampling client made with `record_stability_info=True` records, for each sampled sequence, under its `sequence_id`:
the request's prompt tokens, the sampled tokens and the sampler's log-probabilities of them. A `stable_reinforce`
datum names its origin with provenance spans (the SDK's `Datum.with_provenance`): `model_input_spans` tile its input
tokens and `loss_fn_input_spans` tile its `target_tokens`, each span saying "these positions are positions
[offset, offset + length) of sequence S's prompt (PromptProvenanceSpan) or of its sampled tokens
(SampledProvenanceSpan)". `loss_inputs` checks every span against the records (the tokens must be the recorded ones,
the spans must tile their field, only sampled target positions may carry a nonzero advantage) and returns the
recorded sampler log-probabilities and a mask of the sampled target positions, which the loss (losses.py) uses.

Records are kept per process, tagged with the session that sampled them: they are dropped when that session closes,
and beyond MAX_RECORDS the oldest go first (the hosted service says its records are session-scoped and expire after
inactivity). A sequence id from another session of this process is accepted.

Not here: the loss formula (losses.py), sampling (local.py), the wire format (serve/wire.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
from tinker import types

MAX_RECORDS = 20_000


@dataclass(frozen=True)
class SequenceRecord:
    session_id: str | None
    prompt_tokens: list[int]
    tokens: list[int]
    logprobs: list[float]


class StabilityRecords:
    """Recorded sampled sequences by sequence_id (thread-safe, bounded)."""

    def __init__(self, max_records: int = MAX_RECORDS):
        self._records: OrderedDict[str, SequenceRecord] = OrderedDict()
        self._lock = threading.Lock()
        self.max_records = max_records

    def add(self, sequence_id: str, record: SequenceRecord) -> None:
        with self._lock:
            self._records[sequence_id] = record
            while len(self._records) > self.max_records:
                self._records.popitem(last=False)

    def get(self, sequence_id: str) -> SequenceRecord:
        with self._lock:
            record = self._records.get(sequence_id)
        if record is None:
            raise ValueError(
                f"stable_reinforce: sequence {sequence_id!r} has no sampling record; sample it with a client made "
                "with record_stability_info=True in this session (records end with the session)"
            )
        return record

    def forget_session(self, session_id: str) -> int:
        with self._lock:
            gone = [key for key, record in self._records.items() if record.session_id == session_id]
            for key in gone:
                del self._records[key]
        return len(gone)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)


RECORDS = StabilityRecords()


def _expand(spans: list, what: str, index: int, records: StabilityRecords) -> tuple[list[int], list[float | None]]:
    """The recorded token at each position the spans tile, and its sampler log-prob (None for prompt positions)."""
    tokens: list[int] = []
    logprobs: list[float | None] = []
    for span in spans:
        record = records.get(span.sequence_id)
        sampled = isinstance(span, types.SampledProvenanceSpan)
        source = record.tokens if sampled else record.prompt_tokens
        end = span.offset + span.length
        if end > len(source):
            kind = "sampled tokens" if sampled else "prompt"
            raise ValueError(
                f"datum {index}: a {what} span covers positions {span.offset}..{end} of sequence "
                f"{span.sequence_id!r}'s {kind}, which has {len(source)}"
            )
        tokens.extend(source[span.offset : end])
        logprobs.extend(record.logprobs[span.offset : end] if sampled else [None] * span.length)
    return tokens, logprobs


def loss_inputs(datum: types.Datum, index: int, records: StabilityRecords = RECORDS) -> dict[str, torch.Tensor]:
    """The datum's loss inputs for stable_reinforce: target_tokens, advantages, `logprobs` replaced by the recorded
    sampler log-probs (0 at prompt positions) and `sampled_mask` (1 where the target is a sampled token)."""
    if datum.model_input_spans is None or datum.loss_fn_input_spans is None:
        raise ValueError(
            f"datum {index}: loss_fn='stable_reinforce' needs provenance (Datum.with_provenance) naming the sampled "
            "sequences its tokens come from"
        )
    input_tokens, _ = _expand(datum.model_input_spans, "model_input", index, records)
    if input_tokens != datum.model_input.to_ints():
        raise ValueError(f"datum {index}: model_input differs from the recorded tokens its model_input_spans name")
    target_tokens, sampler_logprobs = _expand(datum.loss_fn_input_spans, "loss_fn_inputs", index, records)
    inputs = {k: v.to_torch() for k, v in datum.loss_fn_inputs.items()}
    if target_tokens != inputs["target_tokens"].tolist():
        raise ValueError(f"datum {index}: target_tokens differ from the recorded tokens its loss_fn_input_spans name")
    sampled = torch.tensor([lp is not None for lp in sampler_logprobs], dtype=torch.bool)
    advantages = inputs["advantages"].float()
    if bool((advantages[~sampled] != 0).any()):
        raise ValueError(
            f"datum {index}: stable_reinforce takes nonzero advantages on sampled tokens only; some prompt positions "
            "have one"
        )
    inputs["logprobs"] = torch.tensor([0.0 if lp is None else lp for lp in sampler_logprobs], dtype=torch.float32)
    inputs["sampled_mask"] = sampled.float()
    return inputs
