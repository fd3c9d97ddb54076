"""A pruned model as a Hugging Face folder that stock transformers loads (part of :mod:`headprune_bench.methods.heads`).

:func:`export_pruned` removes the pruned heads physically (:func:`~headprune_bench.methods.heads.remove_heads`) from a copy of a
sequence classifier of any supported family and saves it with its tokenizer and the file ``modeling_pruned.py``
(:mod:`headprune_bench.methods.heads.modeling_pruned`, whose family class ``config.json``'s ``auto_map`` names), so that
``AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)`` rebuilds the uneven
per-layer head counts without this package.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
from torch import nn

from headprune_bench.methods.heads.removal import remove_heads, save_pruned

REMOTE_FILE = "modeling_pruned.py"


def _remote_classes() -> dict[str, type]:
    """``config.model_type`` -> the class of :mod:`headprune_bench.methods.heads.modeling_pruned` named in ``auto_map`` (each
    extends its family's stock classifier). Imported on first export: building those classes imports every family's
    transformers module, about 2 s that ``import headprune_bench.methods.heads`` (every worker, every ``bench`` command) need not pay."""
    from headprune_bench.methods.heads.modeling_pruned import CLASSES

    return CLASSES


def export_pruned(model: nn.Module, mask: torch.Tensor, folder, tokenizer=None) -> Path:
    """Write ``model`` with the heads of ``mask == 0`` physically removed to ``folder``; ``model`` is untouched.

    Args:
        model: a sequence classifier of a supported family (``BertForSequenceClassification``,
            ``RobertaForSequenceClassification``, ``XLMRobertaForSequenceClassification``,
            ``ElectraForSequenceClassification``, ``DistilBertForSequenceClassification``,
            ``DebertaV2ForSequenceClassification``), full or partly pruned, on any device.
        mask: binary ``[L, H]`` in original head indexing, 0 = remove (heads already removed stay removed).
        folder: the output folder (created; files of the same names are overwritten).
        tokenizer: optional Hugging Face tokenizer, saved beside so the folder is complete.

    Returns:
        the folder, holding ``config.json`` (``pruned_heads``, ``auto_map``), ``model.safetensors``, the tokenizer's
        files and ``modeling_pruned.py``.

    Raises:
        ValueError: ``model`` is not one of those classes; a mask of the wrong shape or not binary.
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
"""Every input an exported graph may take (:func:`onnx_inputs` says which one model's graph takes)."""


def onnx_inputs(model: nn.Module) -> tuple[str, ...]:
    """The inputs of ``model``'s ONNX graph: :data:`ONNX_INPUTS`, without ``token_type_ids`` for a model without
    token type embeddings (DistilBERT; DeBERTa-v3's ``type_vocab_size`` 0), whose forward does not read them."""
    uses_types = int(getattr(model.config, "type_vocab_size", 0) or 0) > 0
    return ONNX_INPUTS if uses_types else ONNX_INPUTS[:2]


def export_onnx(model: nn.Module, path, example: dict[str, torch.Tensor]) -> Path:
    """Write ``model`` (e.g. loaded from an :func:`export_pruned` folder) as an ONNX graph with the inputs
    :func:`onnx_inputs` (each ``[batch, sequence]`` int64, both dimensions dynamic; ``token_type_ids``, where the
    model has them, is 0 for the first sentence and 1 for the second, as the tokenizer returns them) and the output
    ``logits`` (``[batch, num_labels]``), through ``torch.onnx.export(..., dynamo=True)``.

    Args:
        model: a sequence classifier, fp32, on the CPU.
        path: the ``.onnx`` file to write (large weights go to ``<path>.data`` beside it; keep the two together).
        example: the inputs of one batch (traced; other shapes work afterwards).

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
