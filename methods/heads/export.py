"""A pruned model as a Hugging Face folder that stock transformers loads (part of :mod:`methods.heads`).

:func:`export_pruned` removes the pruned heads physically (:func:`~methods.heads.remove_heads`) from a copy of a
``BertForSequenceClassification`` and saves it with its tokenizer and the file ``modeling_pruned_bert.py``
(:mod:`methods.heads.modeling_pruned_bert`, named in ``config.json``'s ``auto_map``), so that
``AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)`` rebuilds the uneven
per-layer head counts without this package.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
from torch import nn

from methods.heads.removal import remove_heads, save_pruned

REMOTE_FILE = "modeling_pruned_bert.py"
REMOTE_CLASS = "PrunedBertForSequenceClassification"


def export_pruned(model: nn.Module, mask: torch.Tensor, folder, tokenizer=None) -> Path:
    """Write ``model`` with the heads of ``mask == 0`` physically removed to ``folder``; ``model`` is untouched.

    Args:
        model: a ``BertForSequenceClassification`` (full or partly pruned), on any device.
        mask: binary ``[L, H]`` in original head indexing, 0 = remove (heads already removed stay removed).
        folder: the output folder (created; files of the same names are overwritten).
        tokenizer: optional Hugging Face tokenizer, saved beside so the folder is complete.

    Returns:
        the folder, holding ``config.json`` (``pruned_heads``, ``auto_map``), ``model.safetensors``, the tokenizer's
        files and ``modeling_pruned_bert.py``.

    Raises:
        ValueError: ``model`` is not a ``BertForSequenceClassification``; a mask of the wrong shape or not binary.
    """
    from transformers import BertForSequenceClassification

    if not isinstance(model, BertForSequenceClassification):
        raise ValueError(f"export_pruned: {type(model).__name__} is not a BertForSequenceClassification (the "
                         f"exported modeling file builds that class)")
    work = remove_heads(copy.deepcopy(model).cpu(), mask)
    work.config.auto_map = {"AutoModelForSequenceClassification": f"{REMOTE_FILE[:-3]}.{REMOTE_CLASS}"}
    work.config.architectures = [REMOTE_CLASS]
    folder = Path(folder)
    save_pruned(work, folder, tokenizer)
    shutil.copyfile(Path(__file__).with_name(REMOTE_FILE), folder / REMOTE_FILE)
    return folder


class _LogitsOnly(nn.Module):
    """``(input_ids, attention_mask, token_type_ids) -> logits``: the signature of the ONNX graph."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_onnx(model: nn.Module, path, example: dict[str, torch.Tensor]) -> Path:
    """Write ``model`` (e.g. loaded from an :func:`export_pruned` folder) as an ONNX graph with the inputs
    :data:`ONNX_INPUTS` (each ``[batch, sequence]`` int64, both dimensions dynamic; ``token_type_ids`` is 0 for
    the first sentence and 1 for the second, as the tokenizer returns them) and the output ``logits``
    (``[batch, num_labels]``), through ``torch.onnx.export(..., dynamo=True)``.

    Args:
        model: a sequence classifier, fp32, on the CPU.
        path: the ``.onnx`` file to write (large weights go to ``<path>.data`` beside it; keep the two together).
        example: the three inputs of one batch (traced; other shapes work afterwards).

    Raises:
        ImportError: ``onnx`` / ``onnxscript`` are not installed (the ``onnx`` extra).
        KeyError: ``example`` lacks one of the inputs.
    """
    path = Path(path)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in ONNX_INPUTS}
    args = tuple(example[name].cpu() for name in ONNX_INPUTS)
    with torch.no_grad():
        torch.onnx.export(_LogitsOnly(model).eval(), args, str(path), input_names=list(ONNX_INPUTS),
                          output_names=["logits"], dynamic_shapes=dynamic, dynamo=True, verbose=False)
    return path
