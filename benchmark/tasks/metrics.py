"""The GLUE metrics of a task's predictions (fractions, never percentages), the majority-class baseline and the
predicted-class share (the two degeneracy checks of docs/protocol.md §6).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from headprune_bench.benchmark.tasks.specs import TaskSpec, get_task


def _f1_binary(y_true, y_pred) -> float:
    # zero_division=0.0 returns what sklearn's default returns (0.0), without the warning.
    return f1_score(y_true, y_pred, average="binary", pos_label=1, zero_division=0.0)


_METRIC_FUNCTIONS = {
    "accuracy": accuracy_score,
    "f1": _f1_binary,
    "matthews_correlation": matthews_corrcoef,
}


def _as_class_ids(values, what: str, num_labels: int) -> np.ndarray:
    """Check that ``values`` is a non-empty 1-D sequence of ids in [0, num_labels)."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(
            f"{what}: expected a 1-D sequence of class ids, got shape {array.shape}"
            " (take the argmax over logits first)"
        )
    if array.size == 0:
        raise ValueError(f"{what}: empty")
    if array.dtype == bool:
        array = array.astype(np.int64)
    if not np.issubdtype(array.dtype, np.number) or not np.all(np.equal(np.mod(array, 1), 0)):
        raise ValueError(f"{what}: expected integer class ids, got dtype {array.dtype}")
    array = array.astype(np.int64)
    outside = array[(array < 0) | (array >= num_labels)]
    if outside.size:
        raise ValueError(f"{what}: class id {outside[0]} outside 0..{num_labels - 1}")
    return array


def compute_metrics(task: TaskSpec | str, predictions, labels) -> dict[str, float]:
    """The task's GLUE metrics of ``predictions`` against ``labels``.

    Args:
        task: task spec or name.
        predictions: 1-D sequence of predicted class ids (length n).
        labels: 1-D sequence of gold class ids (length n).

    Returns:
        ``{metric: value}`` for each of ``task.metrics``, python floats: accuracy and F1 (binary, positive
        class 1) as fractions in [0, 1], Matthews correlation in [-1, 1] (scikit-learn, as the hub's ``evaluate``
        GLUE metric). F1 is 0.0 when class 1 is never predicted nor present; MCC is 0.0 for constant inputs.

    Raises:
        ValueError: inputs not 1-D, empty, of different lengths, or not class ids.
    """
    task = get_task(task)
    y_pred = _as_class_ids(predictions, "predictions", task.num_labels)
    y_true = _as_class_ids(labels, "labels", task.num_labels)
    if y_pred.shape != y_true.shape:
        raise ValueError(f"{len(y_pred)} predictions for {len(y_true)} labels")
    return {metric: float(_METRIC_FUNCTIONS[metric](y_true, y_pred)) for metric in task.metrics}


def majority_baseline(task: TaskSpec | str, train_labels, eval_labels) -> dict:
    """The score of always predicting the eval split's most frequent label (ties: the smaller label id).

    Why the eval split's majority and not the train split's: docs/choices.md ("Tasks and data").

    Returns ``{"majority_label": int, "train_majority_label": int, **compute_metrics(task, predictions,
    eval_labels)}``; ``train_majority_label`` (the train split's most frequent label) is kept for reference only.
    A run at or below this score is degenerate (docs/protocol.md §6).

    Raises:
        ValueError: labels empty or not class ids of the task.
    """
    task = get_task(task)
    train = _as_class_ids(train_labels, "train_labels", task.num_labels)
    gold = _as_class_ids(eval_labels, "eval_labels", task.num_labels)
    majority = int(np.bincount(gold, minlength=task.num_labels).argmax())
    predictions = np.full(gold.shape, majority)
    train_majority = int(np.bincount(train, minlength=task.num_labels).argmax())
    return {"majority_label": majority, "train_majority_label": train_majority,
            **compute_metrics(task, predictions, gold)}


def predicted_class_fraction(predictions) -> float:
    """Share (in [0, 1]) of the predictions that fall in the most frequent predicted class.

    A run with a value above 0.95 on dev is degenerate (docs/protocol.md §6).

    Raises:
        ValueError: predictions empty or not 1-D.
    """
    array = np.asarray(predictions)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"predictions: expected a non-empty 1-D sequence, got shape {array.shape}")
    _, counts = np.unique(array, return_counts=True)
    return float(counts.max() / array.size)
