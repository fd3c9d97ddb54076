"""Tests of headprune_bench.benchmark.tasks: task registry, GLUE loaders, metrics and baselines.

Real-data tests read the GLUE files at $GLUE_DIR, else at ../shared/data/glue
(relative to the repository); they are skipped only when that folder is absent.
Error cases use small TSV files written to tmp_path.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import datasets
import numpy as np
import pytest
from repo_paths import GLUE_ROOT

from headprune_bench.benchmark import tasks
from headprune_bench.benchmark.tasks import (
    TASK_GROUPS,
    TASKS,
    DataError,
    DataWarning,
    compute_metrics,
    load_glue_hub,
    load_glue_local,
    load_task,
    majority_baseline,
    predicted_class_fraction,
    resolve_data_dir,
    resolve_tasks,
)

needs_glue = pytest.mark.skipif(
    not GLUE_ROOT.is_dir(), reason=f"GLUE data folder {GLUE_ROOT} not found (set GLUE_DIR to the shared GLUE files)"
)

# The canonical sizes (= the hub's nyu-mll/glue train/validation sizes).
ROW_COUNTS = {"cola": (8551, 1043), "mrpc": (3668, 408), "rte": (2490, 277), "wnli": (635, 71)}

# The hub's declared features for nyu-mll/glue, written out independently of TaskSpec.features.
_S = datasets.Value("string")
_IDX = datasets.Value("int32")
HUB_FEATURES = {
    "cola": datasets.Features(
        {"sentence": _S, "label": datasets.ClassLabel(names=["unacceptable", "acceptable"]), "idx": _IDX}
    ),
    "mrpc": datasets.Features(
        {
            "sentence1": _S,
            "sentence2": _S,
            "label": datasets.ClassLabel(names=["not_equivalent", "equivalent"]),
            "idx": _IDX,
        }
    ),
    "rte": datasets.Features(
        {
            "sentence1": _S,
            "sentence2": _S,
            "label": datasets.ClassLabel(names=["entailment", "not_entailment"]),
            "idx": _IDX,
        }
    ),
    "wnli": datasets.Features(
        {
            "sentence1": _S,
            "sentence2": _S,
            "label": datasets.ClassLabel(names=["not_entailment", "entailment"]),
            "idx": _IDX,
        }
    ),
}


@pytest.fixture(scope="module")
def glue():
    """All four tasks loaded once from the real GLUE files."""
    return {name: load_glue_local(name, GLUE_ROOT) for name in TASKS}


# --------------------------------------------------------------------------- registry


def test_registry():
    assert set(TASKS) == {"cola", "mrpc", "rte", "wnli"}
    assert TASK_GROUPS["glue-small"] == ("mrpc", "cola", "rte", "wnli")
    for name, spec in TASKS.items():
        assert spec.name == name == spec.hub_config
        assert spec.num_labels == 2
        assert spec.primary_metric in spec.metrics
        assert spec.features == HUB_FEATURES[name]
    assert TASKS["mrpc"].metrics == ("accuracy", "f1") and TASKS["mrpc"].primary_metric == "accuracy"
    assert TASKS["cola"].metrics == ("matthews_correlation",)
    assert TASKS["cola"].glue_dir == "CoLA"


def test_resolve_tasks_group_and_list():
    assert [t.name for t in resolve_tasks("glue-small")] == ["mrpc", "cola", "rte", "wnli"]
    assert [t.name for t in resolve_tasks(" MRPC, cola ")] == ["mrpc", "cola"]
    assert [t.name for t in resolve_tasks("rte,glue-small,rte")] == ["rte", "mrpc", "cola", "wnli"]


@pytest.mark.parametrize("spec, error, match, absent", [
    ("mrcp", DataError, r"unknown task 'mrcp' \(did you mean 'mrpc'\?\); known: cola, mrpc", None),
    ("cola,sst2x", ValueError, "glue-small", "did you mean"),
    (" , ", DataError, "empty task option", None),
], ids=["did-you-mean", "no-close-name", "empty"])
def test_resolve_tasks_did_you_mean(spec, error, match, absent):
    with pytest.raises(error, match=match) as info:
        resolve_tasks(spec)
    assert absent is None or absent not in str(info.value)


def test_resolve_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    assert resolve_data_dir() is None
    monkeypatch.setenv("GLUE_DIR", str(tmp_path / "env"))
    assert resolve_data_dir() == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_dir(str(tmp_path / "arg")) == tmp_path / "arg"


# --------------------------------------------------------------------------- real data


@needs_glue
@pytest.mark.parametrize("name", sorted(TASKS))
def test_canonical_row_counts(glue, name):
    data = glue[name]
    assert set(data) == {"train", "validation"}
    assert (data["train"].num_rows, data["validation"].num_rows) == ROW_COUNTS[name]


@needs_glue
@pytest.mark.parametrize("name", sorted(TASKS))
def test_labels_binary_and_idx_is_row_position(glue, name):
    for split in glue[name].values():
        assert set(split["label"]) == {0, 1}
        assert list(split["idx"]) == list(range(split.num_rows))


@needs_glue
@pytest.mark.parametrize("name", sorted(TASKS))
def test_schema_equals_hub_features(glue, name):
    for split in glue[name].values():
        assert split.features == HUB_FEATURES[name]
        assert list(split.features) == list(HUB_FEATURES[name])  # same column order too


@needs_glue
@pytest.mark.parametrize("name", sorted(TASKS))
def test_no_bom_in_columns_or_text(glue, name):
    for split in glue[name].values():
        assert not any("\ufeff" in column for column in split.column_names)
        first_row = split[0]
        assert not any(str(value).startswith("\ufeff") for value in first_row.values())


@needs_glue
def test_mrpc_file_has_bom_and_first_rows_match_files(glue):
    # The BOM test above is only meaningful because the MRPC files do start with one.
    assert (GLUE_ROOT / "MRPC" / "dev.tsv").read_bytes().startswith(b"\xef\xbb\xbf")
    mrpc = glue["mrpc"]["validation"][0]
    assert mrpc["label"] == 1 and mrpc["sentence1"].startswith("He said the foodservice pie business")
    assert mrpc["sentence2"].startswith('" The foodservice')  # unbalanced quote kept as is (quoting off)
    rte = glue["rte"]["train"][0]  # "not_entailment" in the file -> id 1
    assert rte["label"] == 1 and rte["sentence2"] == "Weapons of Mass Destruction Found in Iraq."
    assert glue["cola"]["train"][0]["sentence"].startswith("Our friends won't buy this analysis")


@needs_glue
@pytest.mark.parametrize(
    "name, metric, reference",
    # protocol.md §7, published majority-class figures (in %): CoLA 0, MRPC 68.4, RTE 52.7, WNLI 56.3.
    [("cola", "matthews_correlation", 0.0), ("mrpc", "accuracy", 0.684), ("rte", "accuracy", 0.527),
     ("wnli", "accuracy", 0.563)],
)
def test_majority_baseline_matches_published(glue, name, metric, reference):
    data = glue[name]
    baseline = majority_baseline(name, data["train"]["label"], data["validation"]["label"])
    assert baseline[metric] == pytest.approx(reference, abs=0.001)
    assert isinstance(baseline["majority_label"], int)


@needs_glue
def test_load_task_uses_glue_dir_env(monkeypatch):
    monkeypatch.setenv("GLUE_DIR", str(GLUE_ROOT))
    data = load_task("WNLI")
    assert data["validation"].num_rows == 71


# --------------------------------------------------------------------------- metrics


def test_compute_metrics_known_values():
    labels = [1, 1, 0, 0]
    # Perfect predictions.
    assert compute_metrics("mrpc", labels, labels) == {"accuracy": 1.0, "f1": 1.0}
    assert compute_metrics("cola", labels, labels) == {"matthews_correlation": 1.0}
    # Inverted predictions: MCC -1, accuracy 0, F1 0 (no true positive).
    inverted = [0, 0, 1, 1]
    assert compute_metrics("cola", inverted, labels)["matthews_correlation"] == pytest.approx(-1.0)
    assert compute_metrics("mrpc", inverted, labels) == {"accuracy": 0.0, "f1": 0.0}
    # tp=1, fn=1, fp=0, tn=2: precision 1, recall 1/2 -> F1 = 2*1*0.5/1.5 = 2/3;
    # MCC = (1*2 - 0*1) / sqrt((1+0)(1+1)(2+0)(2+1)) = 2/sqrt(12).
    predictions = [1, 0, 0, 0]
    mrpc = compute_metrics("mrpc", predictions, labels)
    assert mrpc["accuracy"] == pytest.approx(0.75) and mrpc["f1"] == pytest.approx(2 / 3)
    cola = compute_metrics(TASKS["cola"], np.array(predictions), np.array(labels))
    assert cola["matthews_correlation"] == pytest.approx(2 / math.sqrt(12))
    assert all(type(value) is float for value in {**mrpc, **cola}.values())
    assert set(compute_metrics("rte", predictions, labels)) == {"accuracy"}


def test_compute_metrics_constant_predictions():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no sklearn zero-division warning for F1
        assert compute_metrics("mrpc", [0, 0, 0], [1, 0, 1]) == {"accuracy": pytest.approx(1 / 3), "f1": 0.0}
    assert compute_metrics("cola", [1, 1, 1], [1, 0, 1]) == {"matthews_correlation": 0.0}


@pytest.mark.parametrize(
    "predictions, labels, message",
    [
        ([0, 1], [0, 1, 1], "2 predictions for 3 labels"),
        ([[0.1, 0.9], [0.8, 0.2]], [1, 0], "argmax"),
        ([0, 2], [0, 1], "outside 0..1"),
        ([0.5, 1.0], [0, 1], "integer class ids"),
        ([], [], "empty"),
    ],
)
def test_compute_metrics_rejects_bad_input(predictions, labels, message):
    with pytest.raises(ValueError, match=message):
        compute_metrics("mrpc", predictions, labels)


def test_majority_baseline_small():
    # the eval split's majority decides (issue 10): the train majority (1) would score 0.25, below a constant 0
    result = majority_baseline("rte", [1, 1, 0], [1, 0, 0, 0])
    assert result == {"majority_label": 0, "train_majority_label": 1, "accuracy": 0.75}
    assert majority_baseline("rte", [1], [0, 1])["majority_label"] == 0  # tie -> smaller id
    assert majority_baseline("cola", [1, 1, 0], [0, 1])["matthews_correlation"] == 0.0


def test_predicted_class_fraction():
    assert predicted_class_fraction([0, 0, 0, 1]) == 0.75
    assert predicted_class_fraction(np.ones(20, dtype=int)) == 1.0
    assert predicted_class_fraction([0, 1]) == 0.5
    assert type(predicted_class_fraction([0, 1])) is float
    with pytest.raises(ValueError):
        predicted_class_fraction([])


# --------------------------------------------------------------------------- hub loader (no network)


def _fake_hub(monkeypatch, calls):
    """Replace datasets.load_dataset by a fake returning hub-like MRPC data (int64 idx, with test)."""

    def fake_load_dataset(path, name):
        calls.append((path, name))
        features = datasets.Features(
            {
                "sentence1": datasets.Value("string"),
                "sentence2": datasets.Value("string"),
                "label": datasets.ClassLabel(names=["not_equivalent", "equivalent"]),
                "idx": datasets.Value("int64"),
            }
        )
        rows = {"sentence1": ["a", "b"], "sentence2": ["c", "d"], "label": [0, 1], "idx": [0, 1]}
        split = datasets.Dataset.from_dict(rows, features=features)
        return datasets.DatasetDict({"train": split, "validation": split, "test": split})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)


def test_load_task_without_data_dir_uses_hub(monkeypatch):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    calls = []
    _fake_hub(monkeypatch, calls)
    data = load_task("mrpc")
    assert calls == [("nyu-mll/glue", "mrpc")]
    assert set(data) == {"train", "validation"}
    assert data["train"].features == HUB_FEATURES["mrpc"]  # idx cast to int32


def test_hub_failure_is_data_error(monkeypatch):
    def unreachable(path, name):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(DataError, match="nyu-mll/glue.*no network.*GLUE_DIR or pass --data-dir"):
        load_glue_hub("rte")


# --------------------------------------------------------------------------- local loader errors

BOM = "\ufeff"
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
NLI_HEADER = "index\tsentence1\tsentence2\tlabel"


def write_task(root: Path, glue_dir: str, train: str | None, dev: str | None) -> Path:
    """Write <root>/<glue_dir>/{train,dev}.tsv (None: leave the file out); return root."""
    folder = root / glue_dir
    folder.mkdir(parents=True, exist_ok=True)
    for filename, text in (("train.tsv", train), ("dev.tsv", dev)):
        if text is not None:
            (folder / filename).write_text(text, encoding="utf-8")
    return root


def rte_file(*rows: tuple[str, str, str]) -> str:
    return "\n".join([NLI_HEADER] + [f"{i}\t{a}\t{b}\t{label}" for i, (a, b, label) in enumerate(rows)]) + "\n"


RTE_OK = rte_file(("A man sleeps.", "A man is awake.", "not_entailment"), ("It rains.", "It is wet.", "entailment"))


def test_small_valid_files_with_bom_blank_line_and_quotes(tmp_path):
    mrpc = f'{BOM}{MRPC_HEADER}\n1\t1\t2\tHe said " hi .\tHe said hi .\n0\t3\t4\tA .\tB .\n\n'
    cola = f'{BOM}gj04\t1\t\tThe "cat sat.\ngj04\t0\t*\tCat the sat.\n'
    write_task(tmp_path, "MRPC", mrpc, mrpc)
    write_task(tmp_path, "CoLA", cola, cola)
    data = load_glue_local("mrpc", tmp_path)
    assert data["train"].num_rows == 2
    assert data["train"][0] == {"sentence1": 'He said " hi .', "sentence2": "He said hi .", "label": 1, "idx": 0}
    cola_data = load_task("cola", tmp_path)
    assert cola_data["validation"]["sentence"] == ['The "cat sat.', "Cat the sat."]
    assert cola_data["validation"]["label"] == [1, 0]


MRPC_WITHOUT_2ND_STRING = MRPC_HEADER.replace("\t#2 String", "")
COLA_SHORT_ROW = "gj04\t1\t\tFine.\ngj04\t1\tNo mark column.\n"
WNLI_DIGIT_2 = f"{NLI_HEADER}\n0\tA.\tB.\t2\n"


@pytest.mark.parametrize("load, task, folder, train, dev, match, also", [
    # folder None: nothing is written and the data folder is <tmp_path>/nowhere
    (load_task, "rte", None, None, None, "nowhere does not exist: set GLUE_DIR or pass --data-dir", ()),
    (load_glue_local, "rte", "MRPC", RTE_OK, RTE_OK, r"task folder .*RTE not found.*subfolders present: MRPC", ()),
    (load_glue_local, "rte", "RTE", RTE_OK, None, r"missing file .*RTE/dev\.tsv", ()),
    (load_glue_local, "rte", "RTE", "", RTE_OK, r"RTE/train\.tsv is empty", ()),
    (load_glue_local, "rte", "RTE", "\n\n", RTE_OK, r"RTE/train\.tsv is empty", ()),
    (load_glue_local, "rte", "RTE", BOM, RTE_OK, r"RTE/train\.tsv is empty", ()),
    (load_glue_local, "rte", "RTE", RTE_OK, NLI_HEADER + "\n", r"dev\.tsv has a header but no data rows", ()),
    (load_glue_local, "mrpc", "MRPC", f"{MRPC_WITHOUT_2ND_STRING}\n1\t1\t2\tA .\n", None,
     r"train\.tsv: missing column\(s\) '#2 String'", ()),
    (load_glue_local, "rte", "RTE", RTE_OK, f"{NLI_HEADER}\tnote\n0\tA.\tB.\tentailment\tx\n",
     r"dev\.tsv: unexpected column\(s\) 'note'", ()),
    (load_glue_local, "cola", "CoLA", COLA_SHORT_ROW, COLA_SHORT_ROW,
     r"train\.tsv, line 2: 3 tab-separated fields, expected 4 \(source, label", ()),
    (load_glue_local, "rte", "RTE", RTE_OK + "2\tA.\tB.\tentailment\textra\n", RTE_OK,
     r"train\.tsv, line 4: 5 tab-separated fields, the header has 4", ()),
    (load_glue_local, "rte", "RTE", RTE_OK, rte_file(("A.", "B.", "entailment"), ("C.", "D.", "contradiction")),
     re.escape("dev.tsv, line 3 (idx 1): unknown label 'contradiction'"),
     ("allowed values: 'entailment' (entailment), 'not_entailment' (not_entailment)",)),
    (load_glue_local, "wnli", "WNLI", WNLI_DIGIT_2, WNLI_DIGIT_2,
     r"unknown label '2'.*allowed values: '0' \(not_entailment\), '1' \(entailment\)", ()),
    (load_glue_local, "rte", "RTE", rte_file(("A.", "B.", "entailment"), ("C.", "  ", "not_entailment")), RTE_OK,
     r"train\.tsv, line 3 \(idx 1\): empty text in column 'sentence2'", ()),
], ids=["missing-data-dir", "missing-task-folder", "missing-file", "empty-file", "empty-file-blank-lines",
        "empty-file-bom-only", "header-without-rows", "missing-column", "extra-column", "cola-wrong-number-of-fields",
        "row-with-fields-unlike-header", "unknown-label", "unknown-digit-label", "empty-text"])
def test_bad_local_files_are_refused_naming_what_is_wrong(tmp_path, load, task, folder, train, dev, match, also):
    """Each case writes <tmp_path>/<folder>/{train,dev}.tsv (None: leaves the file out) and loads ``task``: a
    DataError whose message matches ``match`` (a regular expression) and holds each string of ``also``."""
    root = tmp_path / "nowhere" if folder is None else write_task(tmp_path, folder, train, dev)
    with pytest.raises(DataError, match=match) as info:
        load(task, root)
    for text in also:
        assert text in str(info.value)


def test_one_class_dev_warns_but_loads(tmp_path):
    dev = rte_file(("A.", "B.", "entailment"), ("C.", "D.", "entailment"))
    write_task(tmp_path, "RTE", RTE_OK, dev)
    with pytest.warns(DataWarning, match=r"RTE/dev\.tsv: all 2 rows have label 'entailment'"):
        data = load_glue_local("rte", tmp_path)
    assert data["validation"]["label"] == [0, 0]
    baseline = majority_baseline("rte", data["train"]["label"], data["validation"]["label"])
    assert {k: baseline[k] for k in ("majority_label", "accuracy")} == {"majority_label": 0, "accuracy": 1.0}


def test_data_error_is_value_error():
    assert issubclass(DataError, ValueError)
    assert tasks.__all__  # the public API is declared
