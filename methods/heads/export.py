"""A pruned model as a Hugging Face folder that stock transformers loads with ``trust_remote_code=True`` (through
the copied :mod:`~headprune_bench.methods.heads.modeling_pruned`), and as ONNX. See docs/heads.md ("Export")."""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
from torch import nn

from headprune_bench.methods.heads.removal import remove_heads, save_pruned

REMOTE_FILE = "modeling_pruned.py"


def _remote_classes() -> dict[str, type]:
    """``config.model_type`` -> the :mod:`~headprune_bench.methods.heads.modeling_pruned` class (lazy import)."""
    from headprune_bench.methods.heads.modeling_pruned import CLASSES

    return CLASSES


def export_pruned(model: nn.Module, mask: torch.Tensor, folder, tokenizer=None) -> Path:
    """Write a copy of ``model`` (a ``*ForSequenceClassification`` of a supported family, possibly partly pruned)
    with the heads of ``mask == 0`` (binary ``[L, H]``, original indices) removed to ``folder``, with ``tokenizer``
    if given. Returns the folder (``config.json``, ``model.safetensors``, ``modeling_pruned.py``).

    Raises:
        ValueError: ``model`` is not such a classifier; a mask of the wrong shape or not binary.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    stock = {t: cls.__bases__[-1] for t, cls in _remote_classes().items()}
    if model_type not in stock or not isinstance(model, stock[model_type]):  # exported Pruned* classes extend them
        raise ValueError(f"export_pruned: {type(model).__name__} (model_type={model_type!r}) is not one of the "
                         f"sequence classifiers the exported modeling file builds: "
                         f"{', '.join(sorted(c.__name__ for c in stock.values()))}")
    work = remove_heads(copy.deepcopy(model).cpu(), mask)
    remote_class = _remote_classes()[model_type].__name__
    work.config.auto_map = {"AutoModelForSequenceClassification": f"{REMOTE_FILE[:-3]}.{remote_class}"}
    work.config.architectures = [remote_class]
    folder = Path(folder)
    save_pruned(work, folder, tokenizer)
    shutil.copyfile(Path(__file__).with_name(REMOTE_FILE), folder / REMOTE_FILE)
    return folder


class _LogitsOnly(nn.Module):
    """``(input_ids, attention_mask[, token_type_ids]) -> logits``: the signature of the ONNX graph."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits


ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""Every input an exported graph may take."""


def onnx_inputs(model: nn.Module) -> tuple[str, ...]:
    """:data:`ONNX_INPUTS`, without ``token_type_ids`` for a model without token type embeddings."""
    uses_types = int(getattr(model.config, "type_vocab_size", 0) or 0) > 0
    return ONNX_INPUTS if uses_types else ONNX_INPUTS[:2]


def export_onnx(model: nn.Module, path, example: dict[str, torch.Tensor]) -> Path:
    """Write ``model`` as an ONNX graph (``torch.onnx.export(..., dynamo=True)``): inputs :func:`onnx_inputs`, each
    ``[batch, sequence]`` int64 with both dimensions dynamic; output ``logits`` ``[batch, num_labels]``.

    ``model``: a sequence classifier, fp32, on the CPU; ``path``: the ``.onnx`` file (large weights go to
    ``<path>.data`` beside it); ``example``: one batch's inputs, traced.

    Raises:
        ImportError: ``onnx`` / ``onnxscript`` are not installed (the ``onnx`` extra).
        KeyError: ``example`` lacks one of the inputs.
    """
    path = Path(path)
    names = onnx_inputs(model)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in names}
    args = tuple(example[name].cpu() for name in names)
    with torch.no_grad():
        torch.onnx.export(_LogitsOnly(model).eval(), args, str(path), input_names=list(names),
                          output_names=["logits"], dynamic_shapes=dynamic, dynamo=True, verbose=False)
    return path
