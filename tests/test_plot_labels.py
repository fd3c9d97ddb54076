"""Labels of the report's plots (issue 38): distinct within a panel, naming the condition where a panel mixes
conditions, and an option-set hash only where a panel holds two option sets of one method."""
from __future__ import annotations

import warnings

import pytest
from synthetic_runs import make_records, write_run

from headprune_bench.benchmark.report import ReportWarning, analyse, load_runs, plots
from headprune_bench.benchmark.report.units import Unit

RECOVER, OWN, PRUNE_ONLY = "prune+recover", "own-fine-tuning", "prune-only"


def test_one_methods_recover_and_own_rows_get_distinct_labels_naming_their_condition():
    units = [Unit("voita", "voita", "fraction:0.3", RECOVER), Unit("voita", "voita", "fraction:0.3", OWN),
             Unit("auber", "auber", "own", RECOVER), Unit("auber", "auber", "own", OWN)]
    labels = plots.point_labels(units)
    assert list(labels.values()) == ["voita 30% +recover", "voita 30%, own weights", "auber own count +recover",
                                     "auber own count, own weights"]
    stacked = plots.point_labels(units, sep="\n")
    assert stacked[units[1]] == "voita\n30%\nown weights" and len(set(stacked.values())) == 4


def test_a_hash_only_where_the_panel_holds_two_option_sets_of_the_method():
    # the method ran with two option sets in the folders, so every one of its units carries a hash
    a, b = "0ebd5dde9803", "b6dd5a6c53c9"
    one_set = [Unit("voita", "voita", "fraction:0.3", RECOVER, b), Unit("voita", "voita", "fraction:0.3", OWN, b),
               Unit("michel", "michel", "fraction:0.3", RECOVER)]
    assert "opts" not in " ".join(plots.point_labels(one_set).values())
    two_sets = [Unit("voita", "voita", "fraction:0.3", PRUNE_ONLY, a), Unit("voita", "voita", "fraction:0.3",
                                                                            PRUNE_ONLY, b),
                Unit("michel", "michel", "fraction:0.3", PRUNE_ONLY)]
    assert list(plots.point_labels(two_sets).values()) == ["voita 30% opts=0ebd5d", "voita 30% opts=b6dd5a",
                                                           "michel 30%"]


def test_the_main_option_set_is_the_one_in_most_rows_then_the_first_by_hash():
    rows = [("voita", "b6dd5a")] * 5 + [("voita", "0ebd5d")] + [("dsp", "")] * 3 + [("michel", "f0"), ("michel", "a1")]
    assert plots.second_option_sets(rows) == {("voita", "0ebd5d"), ("michel", "f0")}
    assert plots.second_option_sets([]) == set()


def _run_records() -> list[dict]:
    """voita, auber and random in prune-only, prune+recover and (voita, auber) own fine-tuning; voita's prune-only
    cells also under a second option set."""
    records = make_records(tasks=("mrpc",), seeds=(0, 1, 2),
                           methods={"original": ["none"], "random": ["fraction:0.25", "fraction:0.5"],
                                    "voita": ["fraction:0.5"], "auber": ["own"]},
                           conditions=("prune-only", "prune+recover"))
    own = [dict(r, condition=OWN, retrained=True, schema=2, weights="own",
                cell=r["cell"].replace(f"|{PRUNE_ONLY}|", f"|{OWN}|"))
           for r in records if r["method"] in ("voita", "auber") and r["condition"] == PRUNE_ONLY]
    second = [dict(r, method_options={"lr": 0.4}, cell=r["cell"].replace("opts=abc123", "opts=bbb222"))
              for r in records if r["method"] == "voita" and r["condition"] == PRUNE_ONLY]
    return records + own + second


def _labels(fig) -> list[list[str]]:
    """Per panel (axes) and per legend: the texts that name what is drawn."""
    out = [[t.get_text() for t in ax.get_xticklabels() if t.get_text()] for ax in fig.axes]
    out += [[ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]]
    out += [[t.get_text() for t in legend.get_texts()] for legend in fig.legends]
    return out


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("run"), _run_records())
    data = load_runs([run])
    results = analyse(data, n_boot=100, n_boot_examples=20)
    drawn: dict[str, object] = {}

    def keep(fig, folder, name, **kwargs):
        drawn[name] = fig
        return []

    patch = pytest.MonkeyPatch()
    patch.setattr(plots, "save_figure", keep)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ReportWarning)  # make_plots turns a failing plot into a warning
            plots.make_plots(data, results, tmp_path_factory.mktemp("plots"))
    finally:
        patch.undo()
    return drawn


def test_every_plot_labels_each_point_once(figures):
    assert set(figures) == {"scores_mrpc", "scores_mrpc_recover", "sweep_mrpc", "sweep_mrpc_recover", "masks_mrpc",
                            "auber_layers_mrpc", "cost_vs_score"}
    for name, fig in figures.items():
        for texts in _labels(fig):
            assert len(texts) == len(set(texts)), (name, texts)


def test_the_recover_panel_names_each_rows_condition_and_no_hash(figures):
    ax = figures["scores_mrpc_recover"].axes[0]
    ticks = [t.get_text().replace("\n", " ") for t in ax.get_xticklabels()]
    assert ticks == ["random 25% +recover", "random 50% +recover", "voita 50% +recover", "voita 50% own weights",
                     "auber own count +recover", "auber own count own weights"]
    legend = [t.get_text() for t in figures["sweep_mrpc_recover"].legends[0].get_texts()]
    assert {"random +recover", "voita, own weights", "auber +recover", "auber, own weights"} <= set(legend)
    keys = [t.get_text() for legend in figures["cost_vs_score"].legends for t in legend.get_texts()]
    assert {"open: +recover", "black edge: own weights"} <= set(keys)


def test_the_prune_only_panel_shows_the_hash_of_the_two_option_sets(figures):
    ticks = [t.get_text().replace("\n", " ") for t in figures["scores_mrpc"].axes[0].get_xticklabels()]
    assert ticks == ["random 25%", "random 50%", "voita 50% opts=abc123", "voita 50% opts=bbb222", "auber own count"]
    titles = [ax.get_title().split("\n")[0] for ax in figures["masks_mrpc"].axes if ax.get_title()]
    assert "voita 50% opts=abc123" in titles and "voita 50% opts=bbb222" in titles
