"""Models that cross a process boundary (Ray's object store) as a :class:`ModelParcel` (class, config, state
dict, mode), rebuilt by their class's constructor on arrival so that everything ``__init__`` sets up exists again
(docs/choices.md, "Models across processes")."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class ModelParcel:
    """A transformers model packed to be pickled: rebuilt by ``cls(config)`` where it is unpacked.

    Attributes:
        cls: the model's class (pickled by reference).
        config: its ``PretrainedConfig`` (with ``pruned_heads``, attention implementation and dtype as they were).
        state: its ``state_dict()``, on the CPU.
        training: whether it was in training mode.
    """

    cls: type
    config: Any
    state: dict[str, torch.Tensor]
    training: bool

    @classmethod
    def pack(cls, model: Any) -> Any:
        """``model`` as a parcel, on the CPU; a value that is not a transformers ``PreTrainedModel`` (None, a
        plain ``nn.Module``) is returned unchanged."""
        from transformers import PreTrainedModel

        if not isinstance(model, PreTrainedModel):
            return model
        state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
        return cls(type(model), copy.deepcopy(model.config), state, model.training)

    def unpack(self) -> nn.Module:
        """The model, rebuilt by its class's constructor, with the packed weights, on the CPU.

        Raises:
            RuntimeError: the state dict does not fit the rebuilt architecture (strict load).
        """
        from headprune_bench.methods.heads import get_layout, mask_from_pruned_heads, remove_heads

        config = copy.deepcopy(self.config)
        pruned = {int(layer): list(heads) for layer, heads in (getattr(config, "pruned_heads", None) or {}).items()}
        if pruned:
            config.pruned_heads = {}  # the fresh model has every head; remove_heads records them again
        model = self.cls(config)
        if pruned:
            layout = get_layout(model)
            remove_heads(model, mask_from_pruned_heads(pruned, layout.num_layers, layout.num_heads))
        model.load_state_dict(self.state, strict=True, assign=True)
        return model.train(self.training)


def unpack(value: Any) -> Any:
    """The model of a :class:`ModelParcel`; any other value unchanged."""
    return value.unpack() if isinstance(value, ModelParcel) else value
