"""The tinker SDK's protobuf wire format, for the two places it uses it: forward_backward requests come in as
`tinker_public_pb2.ForwardBackwardRequest`, and ForwardBackwardOutput / SampleResponse results go out as protobuf
(the SDK 0.38 asks for them with `Accept: application/x-protobuf` and refuses them as JSON). These are the inverses
of the SDK's own `tinker.proto.request_conv` (encode) and `tinker.proto.response_conv` (decode); tests round-trip
them through those. Everything else on the wire is JSON of the SDK's pydantic types.

Not here: routes (app.py), sessions and futures (state.py).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.types.topk_logprobs import MASK_LOGPROB

PROTO_CONTENT_TYPE = "application/x-protobuf"
_DTYPES: dict[int, tuple[Literal["float32", "int64"], type]] = {
    pb.DTYPE_FLOAT32: ("float32", np.float32),
    pb.DTYPE_INT64: ("int64", np.int64),
    pb.DTYPE_INT32: ("int64", np.int32),
}
_STOP_REASONS = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


def _tensor(msg: pb.Tensor) -> types.TensorData:
    if msg.dtype not in _DTYPES:
        raise ValueError(f"forward_backward: tensor dtype {msg.dtype} is not supported (float32 and int64 are)")
    if msg.HasField("sparse_csr"):
        raise ValueError("forward_backward: sparse tensors are not supported by cookbook serve")
    name, np_dtype = _DTYPES[msg.dtype]
    data = np.frombuffer(msg.dense, dtype=np_dtype).astype(np.float32 if name == "float32" else np.int64)
    return types.TensorData(data=data.tolist(), dtype=name, shape=list(msg.shape) or None)


def _model_input(chunks) -> types.ModelInput:
    pieces: list[types.ModelInputChunk] = []
    for chunk in chunks:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise ValueError("forward_backward: only token (encoded_text) inputs are supported by cookbook serve")
        pieces.append(types.EncodedTextChunk(tokens=np.frombuffer(chunk.encoded_text.tokens, np.int32).tolist()))
    return types.ModelInput(chunks=pieces)


def _spans(messages) -> list | None:
    """Provenance spans (the inverse of request_conv._write_provenance_span); None when the datum has none."""
    spans: list = []
    for msg in messages:
        arm = msg.WhichOneof("span")
        kind = types.SampledProvenanceSpan if arm == "sampled_tokens" else types.PromptProvenanceSpan
        body = getattr(msg, arm or "prompt_tokens")
        spans.append(kind(sequence_id=body.sequence_id, offset=body.offset, length=body.length))
    return spans or None


def parse_forward_backward(body: bytes) -> tuple[str, str, dict | None, list[types.Datum], bool]:
    """(model_id, loss_fn, loss_fn_config, data, forward_only) of a protobuf forward_backward request; a body that
    is not one (corrupt wire format, tensors of the wrong size or type) -> ValueError naming why (a 400)."""
    try:
        return _parse_forward_backward(body)
    except ValueError:
        raise
    except Exception as exc:  # DecodeError, TypeError, ...: all mean a malformed request, never a server fault
        raise ValueError(f"forward_backward: the body is not a valid ForwardBackwardRequest ({exc})") from None


def _parse_forward_backward(body: bytes) -> tuple[str, str, dict | None, list[types.Datum], bool]:
    msg = pb.ForwardBackwardRequest()
    msg.ParseFromString(body)
    config: dict = {k: v for k, v in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    data = [
        types.Datum(
            model_input=_model_input(d.model_input),
            loss_fn_inputs={k: _tensor(v) for k, v in d.loss_fn_inputs.items()},
            model_input_spans=_spans(d.model_input_spans),
            loss_fn_input_spans=_spans(d.loss_fn_input_spans),
        )
        for d in msg.data
    ]
    return msg.model_id, msg.loss_fn, config or None, data, bool(msg.forward_only)


def forward_backward_output(output: types.ForwardBackwardOutput) -> bytes:
    """A ForwardBackwardOutput as the SDK's protobuf: one ArrayRecord holding every datum's outputs."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type=output.loss_fn_output_type)
    for key, value in output.metrics.items():
        msg.metrics[key] = float(value)
    if output.loss_fn_outputs:
        record = msg.loss_fn_outputs.add()
        record.num_datums = len(output.loss_fn_outputs)
        for name in output.loss_fn_outputs[0]:
            arrays = [np.asarray(datum[name].to_numpy()) for datum in output.loss_fn_outputs]
            is_int = arrays[0].dtype.kind in "iu"
            flat = [a.astype(np.int64 if is_int else np.float32).ravel() for a in arrays]
            offsets = np.cumsum([0] + [a.nbytes for a in flat]).astype(np.int64)
            tensor = record.fields[name]
            tensor.data = b"".join(a.tobytes() for a in flat)
            tensor.offsets = offsets.tobytes()
            tensor.dtype = pb.DTYPE_INT64 if is_int else pb.DTYPE_FLOAT32
            tensor.trailing_shape.extend(list(arrays[0].shape[1:]))
    return msg.SerializeToString()


def sample_response(response: types.SampleResponse) -> bytes:
    """A SampleResponse as the SDK's protobuf (prompt log-probs with None as NaN, as the SDK reads them)."""
    msg = pb.SampleResponse()
    for sequence in response.sequences:
        seq = msg.sequences.add()
        seq.stop_reason = _STOP_REASONS[sequence.stop_reason]
        seq.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        if sequence.logprobs is not None:
            seq.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
    if response.prompt_logprobs is not None:
        values = [math.nan if v is None else v for v in response.prompt_logprobs]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    if response.topk_prompt_logprobs is not None:  # dense (length, k) matrices, the SDK's sentinel where empty
        rows = response.topk_prompt_logprobs
        k = max((len(row) for row in rows if row), default=0)
        token_ids = np.zeros((len(rows), k), dtype=np.int32)
        logprobs = np.full((len(rows), k), MASK_LOGPROB, dtype=np.float32)
        for i, row in enumerate(rows):
            for j, (token, logprob) in enumerate(row or []):
                token_ids[i, j], logprobs[i, j] = token, logprob
        msg.topk_prompt_logprobs.token_ids = token_ids.tobytes()
        msg.topk_prompt_logprobs.logprobs = logprobs.tobytes()
        msg.topk_prompt_logprobs.k = k
        msg.topk_prompt_logprobs.length = len(rows)
    return msg.SerializeToString()
