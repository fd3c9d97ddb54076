"""Models crossing a process boundary (``headprune_bench.benchmark.execution.ray.transport``): a model unpacked in a
fresh process gives the same logits and attention maps as the original, physically removed heads included.

Why it matters: a transformers-5 model unpickled in a process that never constructed its class answers
``output_attentions=True`` with ``attentions=None`` (its class's output recorders are registered in
``PreTrainedModel.__init__``). The quick run's confidence cells failed that way on Ray workers that received a
base model the driver had loaded from disk.

Exactness is checked in float64 (same weights, same operations on the same machine, so the two processes agree
to the last bits up to summation order; 1e-12 is far above float64 rounding at these magnitudes, ~1e-15).
"""
from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from headprune_bench.benchmark.execution.ray.transport import ModelParcel, unpack
from headprune_bench.methods.attention import attention_maps
from headprune_bench.methods.heads import remove_heads


def _tiny(seed: int = 0):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, num_labels=2)
    return BertForSequenceClassification(config).double().eval()


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 64, (3, 9), generator=g)
    attention = torch.ones_like(ids)
    attention[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": attention}


def _outputs(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        logits = model(**_batch()).logits
    return logits, attention_maps(model, _batch())


_CHILD = textwrap.dedent("""
    import pickle, sys, torch
    from headprune_bench.methods.attention import attention_maps
    sys.path.insert(0, sys.argv[3])
    from test_transport import _outputs
    from headprune_bench.benchmark.execution.ray.transport import unpack
    with open(sys.argv[1], "rb") as f:
        model = unpack(pickle.load(f))
    logits, attn = _outputs(model)
    torch.save({"logits": logits, "attn": attn, "training": model.training}, sys.argv[2])
""")


def test_a_parcel_unpacked_in_a_fresh_process_has_its_attention_maps_and_logits(tmp_path):
    from repo_paths import REPO_ROOT

    model = _tiny()
    parcel = tmp_path / "parcel.pkl"
    parcel.write_bytes(pickle.dumps(ModelParcel.pack(model)))
    out = tmp_path / "out.pt"
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(parcel), str(out), str(Path(__file__).parent)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    child = torch.load(out)
    logits, attn = _outputs(model)
    assert child["attn"].shape == attn.shape == (3, 3, 4, 9, 9)
    torch.testing.assert_close(child["logits"], logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(child["attn"], attn, rtol=0, atol=1e-12)
    assert child["training"] is False


def test_physically_removed_heads_survive_the_trip():
    model = _tiny(seed=3)
    mask = torch.ones(3, 4)
    mask[0, [1, 3]] = 0
    mask[1, :] = 0  # a layer emptied
    remove_heads(model, mask)
    parcel = pickle.loads(pickle.dumps(ModelParcel.pack(model)))
    rebuilt = parcel.unpack()
    assert rebuilt is not model and rebuilt.config.pruned_heads == model.config.pruned_heads
    assert sum(p.numel() for p in rebuilt.parameters()) == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(**_batch()).logits, model(**_batch()).logits, rtol=0, atol=1e-12)


def test_training_mode_is_kept_and_other_values_pass_unchanged():
    model = _tiny().train()
    assert ModelParcel.pack(model).unpack().training is True
    plain = nn.Linear(2, 2)
    assert ModelParcel.pack(plain) is plain and ModelParcel.pack(None) is None
    assert unpack(plain) is plain and unpack(None) is None


def test_a_state_dict_that_does_not_fit_is_refused():
    parcel = ModelParcel.pack(_tiny())
    parcel.state.pop("classifier.weight")
    with pytest.raises(RuntimeError, match="classifier.weight"):
        parcel.unpack()
