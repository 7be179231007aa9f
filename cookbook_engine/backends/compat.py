"""What of the tinker SDK's public client surface the local backend cannot honour, and why: ONE table.

Every public method of `tinker.ServiceClient`, `tinker.TrainingClient` and `tinker.SamplingClient` (0.38) is either
implemented by the local backend with a compatible signature (tests/test_tinker_signatures.py checks this against the
installed SDK, method by method) or listed in `UNSUPPORTED` below with the reason. A listed method raises
`NotImplementedError` with that reason when called; options of supported methods that cannot be honoured raise the
same way or warn once (`warn_once`). Also here: `tinker://` checkpoint paths and their mapping to local folders
(saving returns the tinker:// form in process as over HTTP; the studio records local checkpoints by folder).

`stable_reinforce` is supported with a LOCAL definition; the hosted service's exact formula is unpublished, and
results on the hosted service will differ. Locally: a sampling client made with record_stability_info=True records
each sampled sequence (prompt tokens, sampled tokens, sampler log-probs) under its sequence_id (stability.py); a
datum's provenance spans must name recorded sequences whose tokens equal the datum's, and only sampled target
positions may carry a nonzero advantage. Over those sampled positions, with mu the RECORDED sampler log-probs,
r = exp(logprobs - mu) and w = stop_gradient(clip(r, clip_low_threshold=0, clip_high_threshold=2)):
    loss = -sum(w * advantages * logprobs) + kl_coeff * sum(r - 1 - log r)      (kl_coeff defaults to 0)
i.e. REINFORCE with a truncated importance weight to the recorded sampler (losses.py holds the code).

Not here: the clients themselves (local.py), the REST client (rest.py), the HTTP server (serve/).
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

from tinker import types

from cookbook_engine import paths

UNSUPPORTED: dict[str, str] = {
    "ServiceClient.copy_weights": "checkpoints live on this machine only; there are no projects to copy them to",
    "ServiceClient.get_console_url": "there is no Tinker console for local runs; the studio shows them",
    "ServiceClient.holder": "the SDK's internal connection holder has no local counterpart",
    "TrainingClient.get_console_url": "there is no Tinker console for local runs; the studio shows them",
    "TrainingClient.save_weights_external": "external (encrypted, downloadable) weights are a hosted-service feature; "
    "local checkpoints are already PEFT folders on disk",
    "TrainingClient.save_weights_external_async": "see save_weights_external",
    "SamplingClient.create": "the SDK's internal constructor over its connection holder; use "
    "ServiceClient.create_sampling_client",
    "SamplingClient.on_queue_state_change": "the local model worker has no hosted queue states to report",
}


def unsupported(qualified_name: str) -> NotImplementedError:
    """The error a listed method raises: its name and the reason from the table."""
    return NotImplementedError(f"{qualified_name} is not supported by the local backend: {UNSUPPORTED[qualified_name]}")


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """A UserWarning the first time `key` is seen in this process, silence afterwards."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=3)


# --- tinker:// paths ---------------------------------------------------------------------------------------------
# The hosted service names checkpoints tinker://<training_run_id>/weights/<name> (full state) and
# tinker://<training_run_id>/sampler_weights/<name> (sampler weights). Locally the training run id is the training
# client's model_id and the folder is <home>/checkpoints/<model_id>/{state,sampler}/<name>.
KIND_FOLDERS = {"weights": "state", "sampler_weights": "sampler"}
KIND_OF_FOLDER = {folder: kind for kind, folder in KIND_FOLDERS.items()}
CHECKPOINT_META = "checkpoint.json"  # in each checkpoint folder: time, expires_at, user_metadata
RUN_META = "run.json"  # in each training run's folder: base model, LoRA settings, session, user metadata


NAME_MAX = 128  # characters in a checkpoint name or a training run id


def check_name(what: str, name: object, *, extra: str = "") -> str:
    """`name` if it is a safe folder name: letters, digits, '-', '_', '.' (and the characters in `extra`), at most
    NAME_MAX, not starting with '.'. So never empty, '.', '..', a separator or a hidden name; ValueError otherwise.
    An allow-list: a checkpoint or run name only ever names one folder inside its parent."""
    allowed = "-_." + extra
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= NAME_MAX
        or name.startswith(".")
        or not all(c.isalnum() or c in allowed for c in name)
    ):
        raise ValueError(
            f"{what} {name!r} is not a valid name: use 1-{NAME_MAX} letters, digits, '-', '_' or '.'"
            f"{' or ' + repr(extra) if extra else ''}, not starting with '.' (so not '.', '..' or a path)"
        )
    return name


def check_run_id(run_id: object) -> str:
    """A training run id: a safe name that may also hold ':' (the SDK's model ids are "<session>:train:<n>")."""
    return check_name("training run", run_id, extra=":")


def checkpoint_root() -> Path:
    root = paths.home() / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    return root


def tinker_path(model_id: str, kind: str, name: str) -> str:
    """kind: "weights" (state) or "sampler_weights"."""
    return f"tinker://{model_id}/{kind}/{name}"


def parse_tinker_path(path: str) -> types.ParsedCheckpointTinkerPath:
    """The SDK's own parse (checkpoint_id is "weights/<name>" or "sampler_weights/<name>"), with a clear error."""
    try:
        parsed = types.ParsedCheckpointTinkerPath.from_tinker_path(path)
    except Exception as exc:
        raise ValueError(
            f"checkpoint path {path!r}: expected tinker://<training_run_id>/weights/<name> or "
            "tinker://<training_run_id>/sampler_weights/<name>"
        ) from exc
    kind, name = parsed.checkpoint_id.split("/", 1)
    if kind not in KIND_FOLDERS:
        raise ValueError(f"checkpoint path {path!r}: only weights/ and sampler_weights/ checkpoints exist locally")
    check_run_id(parsed.training_run_id)
    check_name("checkpoint", name)
    return parsed


ADAPTER_WEIGHTS = "adapter_model.safetensors"  # the file that makes a folder a checkpoint (PEFT's adapter format)


def holds_checkpoint(path: str | Path) -> bool:
    """True when the checkpoint a folder or tinker:// path names is on this machine (ValueError: a malformed
    tinker:// path)."""
    return (resolve(str(path)) / ADAPTER_WEIGHTS).is_file()


def resolve(path: str) -> Path:
    """The local folder of a checkpoint named by a tinker:// path or by its folder path."""
    if not path.startswith("tinker://"):
        return Path(path)
    parsed = parse_tinker_path(path)
    kind, name = parsed.checkpoint_id.split("/", 1)
    return checkpoint_root() / parsed.training_run_id / KIND_FOLDERS[kind] / name


def local_folder(client: object, path: str) -> str:
    """Where the studio records a checkpoint its loop saved: the folder for a client whose checkpoints live on this
    machine (LOCAL_CHECKPOINTS), the path as returned (a hosted tinker:// name) otherwise."""
    return str(resolve(path)) if getattr(client, "LOCAL_CHECKPOINTS", False) else path


def to_tinker_path(folder: str | Path) -> str | None:
    """The tinker:// name of a folder under the checkpoint root, None for a folder elsewhere."""
    folder = Path(folder).resolve()
    try:
        model_id, kind_folder, name = folder.relative_to(checkpoint_root().resolve()).parts
    except ValueError:
        return None
    kinds = {v: k for k, v in KIND_FOLDERS.items()}
    return tinker_path(model_id, kinds[kind_folder], name) if kind_folder in kinds else None
