"""Kwon et al. 2022 run as the official code runs it (issue 61, part 4): the Fisher minibatches are random subsets
of the split, not runs of neighbouring rows."""
from __future__ import annotations

import dataclasses

from headprune_bench.methods.conformance import synthetic_context, tiny_model
from headprune_bench.methods.kwon import KwonPruner, KwonSearchPruner

ROWS, SAMPLE, BATCH = 5000, 2000, 32


def _sample(seed: int) -> list[int]:
    context = dataclasses.replace(synthetic_context(tiny_model(), seed=seed), num_examples=lambda split: ROWS)
    return KwonPruner(sample_size=SAMPLE, batch_size=BATCH).sample(context)


def test_fisher_minibatches_are_random_subsets_not_runs_of_neighbouring_rows():
    """2000 of 5000 rows in batches of 32. Drawn and then sorted (the code before issue 61), each batch was a run of
    ~80 neighbouring rows (span ~32 * 5000 / 2000) in increasing order. In the order drawn, each batch is a
    uniform subset: its span exceeds half the file unless all 32 rows fall in one half-file window, probability
    <= 32 * 2^-31 ~ 1.5e-8 a batch (~1e-6 for the 63), and it is increasing with probability 1/32! ~ 4e-36. So
    neither assertion can pass by chance for the sorted sample, nor fail by chance for a random one."""
    sample = _sample(seed=0)
    assert len(sample) == SAMPLE and len(set(sample)) == SAMPLE and all(0 <= i < ROWS for i in sample)
    assert _sample(seed=0) == sample and _sample(seed=1) != sample  # deterministic given the cell's seed
    batches = [sample[i:i + BATCH] for i in range(0, SAMPLE, BATCH)]
    assert all(max(b) - min(b) > ROWS / 2 for b in batches)
    assert not any(b == sorted(b) for b in batches)
    # the mean distance of consecutive rows of the sample: ~5000 / 3 when random, ~2.5 when sorted
    gaps = [abs(a - b) for a, b in zip(sample, sample[1:])]
    assert sum(gaps) / len(gaps) > ROWS / 4


def test_the_fisher_pass_batches_the_sample_in_the_order_drawn():
    """``prune`` asks the context for the sample's rows in the order :meth:`sample` gives (the context batches
    ``indices`` in order), not sorted."""
    model = tiny_model().double()
    context = synthetic_context(model, target_heads=3)
    asked = []
    batches = context.batches

    def recording(split, batch_size=32, shuffle=False, seed=None, indices=None):
        asked.append(list(indices))
        return batches(split, batch_size=batch_size, shuffle=shuffle, seed=seed, indices=indices)

    pruner = KwonSearchPruner(sample_size=40, batch_size=8)
    pruner.prune(model, dataclasses.replace(context, batches=recording))
    assert asked == [pruner.sample(context)] and asked[0] != sorted(asked[0])
