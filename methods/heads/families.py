"""One layout adapter per encoder family, and :func:`get_layout`, which picks it by ``config.model_type``. What
removing a head removes in each family: docs/heads.md ("Layouts and families")."""
from __future__ import annotations

from torch import nn

from headprune_bench.methods.heads.layout import (
    EmptySelfAttention,
    HeadLayout,
    UnsupportedArchitectureError,
)


class BertLayout(HeadLayout):
    """BERT (``modeling_bert.py``): ``encoder.layer[l].attention.self.{query,key,value}`` and
    ``.attention.output.dense``, in ``BertModel``, a ``Bert*`` task model or anything whose ``.base_model`` is one."""

    family = "bert"
    model_types = ("bert",)
    where = ".encoder.layer[l].attention.self/.output.dense"
    removes = ("rows of attention.self.query/key/value and columns of attention.output.dense")

    def _layers_of(self, base: nn.Module) -> nn.ModuleList | None:
        layers = getattr(getattr(base, "encoder", None), "layer", None)
        if isinstance(layers, nn.ModuleList) and all(
                hasattr(getattr(layer, "attention", None), "self") and hasattr(layer.attention, "output")
                for layer in layers):
            return layers
        return None

    def attention(self, layer: int) -> nn.Module:
        """The attention block of ``layer``: ``.self`` (Q/K/V + attention) and ``.output`` (W_O, LayerNorm)."""
        return self.encoder_layers()[layer].attention

    def self_attention(self, layer: int) -> nn.Module:
        return self.attention(layer).self

    def set_self_attention(self, layer: int, module: nn.Module) -> None:
        self.attention(layer).self = module

    def output_dense(self, layer: int) -> nn.Linear:
        return self.attention(layer).output.dense

    def set_output_dense(self, layer: int, linear: nn.Linear) -> None:
        self.attention(layer).output.dense = linear


class RobertaLayout(BertLayout):
    """RoBERTa and XLM-R (``modeling_roberta.py``, ``modeling_xlm_roberta.py``): BERT's module names."""

    family = "roberta"
    model_types = ("roberta", "xlm-roberta")

    @classmethod
    def max_tokens(cls, config) -> int | None:
        """``max_position_embeddings - pad_token_id - 1`` (position ids start after the padding index)."""
        return int(config.max_position_embeddings) - int(config.pad_token_id or 0) - 1


class ElectraLayout(BertLayout):
    """ELECTRA discriminator (``modeling_electra.py``): BERT's module names."""

    family = "electra"
    model_types = ("electra",)


class DistilBertLayout(HeadLayout):
    """DistilBERT (``modeling_distilbert.py``): ``transformer.layer[l].attention.{q_lin,k_lin,v_lin,out_lin}``, W_O
    (``out_lin``) inside the self-attention module."""

    family = "distilbert"
    model_types = ("distilbert",)
    projection_names = ("q_lin", "k_lin", "v_lin")
    where = ".transformer.layer[l].attention.q_lin/k_lin/v_lin/out_lin"
    removes = "rows of attention.q_lin/k_lin/v_lin and columns of attention.out_lin"

    def _layers_of(self, base: nn.Module) -> nn.ModuleList | None:
        layers = getattr(getattr(base, "transformer", None), "layer", None)
        if isinstance(layers, nn.ModuleList) and all(hasattr(getattr(layer, "attention", None), "out_lin")
                                                     for layer in layers):
            return layers
        return None

    def self_attention(self, layer: int) -> nn.Module:
        return self.encoder_layers()[layer].attention

    def set_self_attention(self, layer: int, module: nn.Module) -> None:
        self.encoder_layers()[layer].attention = module

    def output_dense(self, layer: int) -> nn.Linear:
        return self.self_attention(layer).out_lin

    def set_output_dense(self, layer: int, linear: nn.Linear) -> None:
        self.self_attention(layer).out_lin = linear

    def set_head_count(self, layer: int, heads: int) -> None:
        self.self_attention(layer).n_heads = heads

    def empty_self_attention(self, layer: int, projections: dict[str, nn.Linear], output: nn.Linear) -> nn.Module:
        return EmptySelfAttention(projections, "v_lin", self.head_size, output=("out_lin", output))


class DebertaV2Layout(BertLayout):
    """DeBERTa-v2 and v3 (``modeling_deberta_v2.py``): ``encoder.layer[l].attention.self.{query,key,value}_proj``,
    also ``pos_key_proj`` / ``pos_query_proj`` when ``share_att_key`` is False, and ``.attention.output.dense``."""

    family = "deberta-v2"
    model_types = ("deberta-v2",)
    projection_names = ("query_proj", "key_proj", "value_proj")
    attn_implementations = ("eager",)
    removes = ("rows of attention.self.query_proj/key_proj/value_proj (and pos_key_proj/pos_query_proj when "
               "present: the head's relative-position scores) and columns of attention.output.dense")
    position_projection_names = ("pos_key_proj", "pos_query_proj")

    @classmethod
    def max_tokens(cls, config) -> int | None:
        """``max_position_embeddings`` with absolute positions (``position_biased_input``), else None."""
        return int(config.max_position_embeddings) if getattr(config, "position_biased_input", True) else None

    def head_projections(self, layer: int) -> dict[str, nn.Linear]:
        module = self.self_attention(layer)
        projections = super().head_projections(layer)
        for name in self.position_projection_names:
            if isinstance(getattr(module, name, None), nn.Linear):
                projections[name] = getattr(module, name)
        return projections


LAYOUTS: dict[str, type[HeadLayout]] = {}
"""``config.model_type`` -> its layout adapter class."""


def register_layout(cls: type[HeadLayout]) -> type[HeadLayout]:
    """Serve ``cls.model_types`` with ``cls`` (a :class:`HeadLayout` subclass); returns ``cls``.

    Raises:
        ValueError: a model type is served already by another adapter.
    """
    for model_type in cls.model_types:
        if LAYOUTS.get(model_type, cls) is not cls:
            raise ValueError(f"model_type {model_type!r} already has the adapter {LAYOUTS[model_type].__name__}")
        LAYOUTS[model_type] = cls
    return cls


for _cls in (BertLayout, RobertaLayout, ElectraLayout, DistilBertLayout, DebertaV2Layout):
    register_layout(_cls)


def supported_model_types() -> tuple[str, ...]:
    """Every ``config.model_type`` with a layout adapter, in registration order."""
    return tuple(LAYOUTS)


def layout_class(model_type: str | None, what: str = "the model") -> type[HeadLayout]:
    """The adapter class for ``model_type`` (no model needed).

    Raises:
        UnsupportedArchitectureError: no adapter; the message names ``what`` and the supported model types.
    """
    if model_type not in LAYOUTS:
        raise UnsupportedArchitectureError(
            f"{what} (model_type={model_type!r}) is not supported; supported model types: "
            f"{', '.join(supported_model_types())}")
    return LAYOUTS[model_type]


def get_layout(model: nn.Module) -> HeadLayout:
    """The layout adapter of ``model``, chosen by ``model.config.model_type``.

    Raises:
        UnsupportedArchitectureError: no adapter for the model type, or its modules are not where the family keeps
            them.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return layout_class(model_type, type(model).__name__)(model)
