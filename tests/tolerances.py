"""Tolerances for comparing two floating-point evaluations of the same mathematical function.

Two computations of one function on one machine, or on two machines, differ by rounding: which rounding errors
are made depends on the kernels (AVX2 or AVX-512 lanes, FMA or not, MKL, oneDNN or cuBLAS, blocking, threads,
memory alignment), so a fixed absolute number such as ``1e-5`` is right on one CPU and wrong on the next. The
tolerance below follows from the unit roundoff, the number of terms that get accumulated, and the magnitude of
the values; the same formula gives ~1e-12 in float64 (where exactness is proved) and ~1e-4 in float32.

Derivation
----------
*Unit roundoff.* Every IEEE-754 operation returns the exact result times ``(1 + delta)``, ``|delta| <= u``, on
every CPU and GPU: ``u = 2**-24 ~ 6.0e-8`` in float32 and ``2**-53 ~ 1.1e-16`` in float64 (round to nearest).

*One reduction.* A sum or inner product of ``n`` terms, computed in ANY order or blocking (sequential, pairwise,
8 or 16 SIMD lanes, split over threads), satisfies ``|fl(s) - s| <= gamma_n * sum_i |x_i y_i|`` with
``gamma_n = n u / (1 - n u)`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, §3.1). Modelling
the rounding errors as independent zero-mean random variables, Higham & Mary (*A new approach to probabilistic
rounding error analysis*, SIAM J. Sci. Comput. 41(5), 2019) replace ``gamma_n`` by ``lambda * sqrt(n) * u``, a
bound that fails with probability of order ``2 n exp(-lambda**2 / 2)``. Kernels differ only in which rounding
errors they make, so every kernel obeys the same bound.

*A network.* An output depends on a chain of reductions: per BERT layer the Q/K/V projection over the hidden
size h, the scores over the head size d, the softmax normaliser and the weighted sum over T tokens, W_O over h,
LayerNorm mean and variance over h each, the FFN over h and then the intermediate size i, LayerNorm again. To
first order each reduction adds a relative error of its own and independent errors add in quadrature, so an
output's relative error is about ``u * sqrt(N)``, ``N`` = the sum of the reduction lengths along the chain
(:func:`bert_path_terms`; a backward pass runs the chain a second time, :func:`bert_gate_gradient_terms`).
This assumes that the layers pass an error on with a gain of about one (LayerNorm renormalises the residual
stream). That is an assumption, and the tests check it instead of trusting it:
``test_heads.test_float32_rounding_model_holds_forward`` (and ``..._gradients``) require every model's float32
outputs (and gate gradients) to stay within HALF the tolerance of their float64 counterparts, on whatever
machine the suite runs.

*Scale.* ``sum |x_i y_i|`` of the last reductions is replaced by the largest magnitude among the compared
values. These must therefore include the O(1) values the errors are relative to (LayerNorm outputs, final hidden
states): the O(0.01) logits of a freshly initialised classifier are sums with heavy cancellation, and their
magnitude alone would give a bound that is too small. For comparisons of logits only, :func:`logit_scale`
supplies the scale from the classifier head's weights.

*Two computations.* ``|a - b| <= |a - exact| + |b - exact|``: a factor 2.

Hence ``tolerance = 2 * lambda * u * sqrt(N) * scale`` with ``lambda = 8`` (:data:`LAMBDA`):
``2 n exp(-32) ~ 2.5e-14 n``: for 1e4 reductions of 3e4 terms each, the chance that any of them exceeds its
bound is below 1e-5. For MiniLM (h 384, i 1536, 6 layers, T 16; N = 27267) and final hidden states up to ~6.2 that is
``16 * 6.0e-8 * 165 * 6.2 ~ 9.8e-4`` in float32 and ``1.8e-12`` in float64; the float32 differences measured on an
AVX-512 AMD EPYC were up to 6.3e-5 (a 1e-5 absolute bound failed there) and the float64 ones up to 2.8e-14.

*What it still catches.* A real error changes the function, not its rounding: masking a wrong head or losing a
bias moved the outputs by 4e-3 to 4e-2 (tiny random model) and by 1 to 2 (MiniLM), 30 to 2500 times the float32
tolerance (``test_heads.test_float32_tolerance_catches_real_errors`` requires more than 10 times).

*Precision in effect.* ``u`` is that of IEEE float32 only when the matrix products really run in float32: TF32
(``u = 2**-11``) or bfloat16 (``2**-8``) matmuls would need a tolerance thousands of times larger, so the CUDA
tests switch TF32 off and the CPU tests assume PyTorch's default (full float32 oneDNN/MKL products).
"""
from __future__ import annotations

import math

import torch

#: Unit roundoff ``u`` (round to nearest) of the floating-point formats the tests compare in.
UNIT_ROUNDOFF: dict[torch.dtype, float] = {torch.float64: 2.0**-53, torch.float32: 2.0**-24}

#: Multiple of the probabilistic standard bound ``sqrt(n) u`` allowed per computation (Higham & Mary 2019):
#: a reduction of n terms exceeds it with probability of order ``2 n exp(-LAMBDA**2 / 2)``.
LAMBDA = 8.0


def unit_roundoff(dtype: torch.dtype) -> float:
    """``u`` of ``dtype`` (float32 or float64)."""
    try:
        return UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise ValueError(f"no unit roundoff recorded for {dtype}; compare in float32 or float64") from None


def bert_path_terms(config, tokens: int, *, attention_weight: float = 1.0) -> float:
    """``N``: summed reduction lengths along the longest chain from the embeddings to the logits of a BERT
    classifier (the final hidden states are reached with the last two of them still to come).

    Embeddings: three rows summed, LayerNorm mean and variance (``2h``). Per layer: Q/K/V projection ``h``,
    scores ``d``, softmax normaliser ``T``, attention-weighted values ``T``, W_O ``h``, LayerNorm ``2h``, FFN in
    ``h``, FFN out ``i``, LayerNorm ``2h``: ``7h + i + d + 2T``. Head: pooler ``h``, classifier ``h``.

    Args:
        config: a BERT config (``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
            ``num_attention_heads``).
        tokens: T, the padded sequence length.
        attention_weight: ``(u_attention / u)**2`` for attention kernels whose products are less exact than one
            float32 rounding: the ``d + 2T`` attention terms of each layer count that many times (errors add in
            quadrature). 16 for CUDA's memory-efficient SDPA in float32, whose 3xTF32 products (CUTLASS
            ``OpMultiplyAddFastF32``) are accurate to about ``2**-22 = 4u``.
    """
    h, i = config.hidden_size, config.intermediate_size
    d = h // config.num_attention_heads
    per_layer = 7 * h + i + attention_weight * (d + 2 * tokens)
    return 3 + 2 * h + config.num_hidden_layers * per_layer + 2 * h


def bert_gate_gradient_terms(config, tokens: int, batch: int) -> float:
    """``N`` for the gradient of a loss with respect to a head gate: the forward chain, the same chain again
    backwards, and the gate's own reduction over the batch, the tokens and the head size."""
    d = config.hidden_size // config.num_attention_heads
    return 2 * bert_path_terms(config, tokens) + batch * tokens * d


def logit_scale(model, hidden_max: float) -> float:
    """The scale of rounding errors in a BERT classifier's logits (``tanh`` pooler, linear classifier).

    A logit is ``w_c . p + b_c`` with ``p = tanh(W_p h_cls + b_p)``. Errors whose components are independent and
    of size ``e`` pass through a linear map with gain at most its spectral norm (``tanh`` is 1-Lipschitz), so:

    * errors already in the final hidden states (scale ``hidden_max``) arrive with gain ``||W_c||_2 ||W_p||_2``;
    * the pooler's own reductions are relative to ``sum_j |W_p,ij| |h_j| <= ||W_p||_inf hidden_max`` and arrive
      with gain ``||W_c||_2``;
    * the classifier's own reductions are relative to ``sum_i |w_ci| |p_i| <= ||W_c||_inf`` since ``|p| <= 1``.

    Returns ``||W_c||_2 (||W_p||_2 + ||W_p||_inf) hidden_max + ||W_c||_inf`` (``||.||_inf``: largest row sum
    of absolute values), to be used as ``scale`` with the N of the whole chain (:func:`bert_path_terms`).
    """
    w_pool = model.bert.pooler.dense.weight.detach().double()
    w_cls = model.classifier.weight.detach().double()

    def spectral(w):
        return float(torch.linalg.matrix_norm(w, 2))

    def inf_norm(w):
        return float(w.abs().sum(dim=1).max())

    return spectral(w_cls) * (spectral(w_pool) + inf_norm(w_pool)) * float(hidden_max) + inf_norm(w_cls)


def rounding_tolerance(reference: torch.Tensor | None, terms: float, dtype: torch.dtype | None = None, *,
                       scale: float | None = None) -> float:
    """``2 * LAMBDA * u * sqrt(terms) * scale``: the largest difference that rounding alone may cause between two
    computations of the same function (module docstring).

    Args:
        reference: one of the compared tensors; ``scale`` defaults to its largest magnitude and ``dtype`` to its
            dtype. It must contain the O(1) values the errors are relative to (not only cancelling logits).
        terms: N, summed reduction lengths along the computation (:func:`bert_path_terms`).
        dtype: the precision the compared values were computed in.
        scale: overrides ``max |reference|`` (e.g. :func:`logit_scale`).
    """
    if dtype is None:
        dtype = reference.dtype
    if scale is None:
        scale = float(reference.detach().abs().max())
    return 2 * LAMBDA * unit_roundoff(dtype) * math.sqrt(terms) * scale


def float32_tolerance(reference: torch.Tensor, terms: float, *, scale: float | None = None) -> float:
    """:func:`rounding_tolerance` in float32 (whatever ``reference``'s dtype)."""
    return rounding_tolerance(reference, terms, torch.float32, scale=scale)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` as a Python float (compared in the wider of the two dtypes)."""
    return float((a.detach() - b.detach()).abs().max())


def assert_within(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str = "") -> float:
    """Assert ``max |actual - expected| <= tol``; returns the difference (the message shows both)."""
    diff = max_abs_diff(actual, expected)
    assert diff <= tol, f"{what}: max |difference| {diff:.3g} exceeds the rounding tolerance {tol:.3g}"
    return diff
