"""Metrics of hand-made run folders, whose answers are worked out by hand in the comments."""

import math
import subprocess
import sys

import pandas as pd
import pytest

from stragglerlab.analysis.collection import flatten, keys_table, load_runs, summary_table, tidy, varying_keys
from stragglerlab.analysis.metrics import (
    Tally,
    model_evals,
    run_metrics,
    staleness_histogram,
    summarize,
    to_target,
    wait_fraction,
)
from stragglerlab.analysis.runfolder import SCHEMAS, load_run
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.provenance import meta
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ALGORITHMS
from tests.analysis.handmade import write_run
from tests.helpers import scenario

#: worker, iteration, t_start, t_post, t_done, compute, wait, round, model_version, staleness, fresh
ROWS = [
    (0, 0, 0.0, 1.0, 2.0, 1.0, 1.0, 0, 0, 0, True, 10),
    (0, 1, 2.0, 3.0, 4.0, 1.0, 1.0, 1, 1, 0, True, 10),
    (1, 0, 0.0, 2.0, 2.0, 2.0, 0.0, 0, 0, 0, True, 10),
    (1, 1, 2.0, 4.0, 4.0, 2.0, 0.0, 3, 1, 2, False),  # late: carried two rounds on
    (2, 0, 0.0, 4.0, 4.0, 4.0, 0.0, -1, 0, -1, False),  # carried by no round
]
#: t, iteration, worker, loss, accuracy
EVALS = [
    (0.5, 5, 0, 0.0, 1.0),
    (1.0, 10, -1, 1.0, 0.1),
    (2.0, 20, -1, 0.6, 0.5),
    (3.0, 30, -1, 0.4, 0.7),
    (4.0, 40, -1, 0.2, 0.9),
]


@pytest.fixture
def run(tmp_path):
    return load_run(write_run(tmp_path / "run", ROWS, workers=3, batch=10, evals=EVALS))


def test_throughput_iteration_time_and_fresh_fraction(run):
    m = run_metrics(run)
    assert m["samples_per_s"] == pytest.approx(4 * 10 / 4.0)  # 4 carried worker-iterations of 10 samples in 4 s
    assert m["raw_samples_per_s"] == pytest.approx(5 * 10 / 4.0)  # all 5, over the makespan
    assert m["mean_iteration"] == pytest.approx((2 + 2 + 2 + 2 + 4) / 5)
    assert m["fresh_fraction"] == pytest.approx(3 / 5)
    assert m["makespan"] == 4.0 and m["span"] == 4.0 and m["iterations"] == 5


#: worker 1 runs on after the last round: its last two iterations are carried by none
LATE = [
    (0, 0, 0.0, 1.0, 1.0, 1.0, 0.0, 0, 0, 0, True, 10),
    (0, 1, 1.0, 2.0, 2.0, 1.0, 0.0, 1, 1, 0, True, 10),
    (1, 0, 0.0, 1.0, 1.0, 1.0, 0.0, 0, 0, 0, True, 10),
    (1, 1, 1.0, 4.0, 4.0, 3.0, 0.0, -1, 1, -1, False, 10),
    (1, 2, 4.0, 6.0, 6.0, 2.0, 0.0, -1, 1, -1, False, 10),
]


def test_applied_throughput_is_over_the_span_of_the_rounds(tmp_path):
    m = run_metrics(load_run(write_run(tmp_path / "run", LATE, workers=2, batch=10)))
    assert m["span"] == 2.0 and m["makespan"] == 6.0  # the last carried row is done at 2 s, the last row at 6 s
    assert m["samples_per_s"] == pytest.approx(3 * 10 / 2.0)  # 3 carried worker-iterations in 2 s
    assert m["raw_samples_per_s"] == pytest.approx(5 * 10 / 6.0)


def test_where_workers_step_their_own_replicas_every_gradient_is_applied_at_its_release(tmp_path):
    """The same rows under ``applied = release`` (model averaging, gossip, local steps): worker 1's two uncarried
    iterations stepped its own replica, so all 5 are applied, the last at 6 s, as the raw throughput counts them."""
    m = run_metrics(load_run(write_run(tmp_path / "run", LATE, workers=2, batch=10, applied="release")))
    assert m["span"] == m["makespan"] == 6.0
    assert m["samples_per_s"] == pytest.approx(5 * 10 / 6.0) == m["raw_samples_per_s"]
    sums = Tally().add(pd.DataFrame(LATE, columns=SCHEMAS["iterations"].names)).sums
    bare = summarize(load_run(write_run(tmp_path / "tally", [], workers=2, tally=sums, applied="release")))
    assert bare.samples_per_s == pytest.approx(m["samples_per_s"])


def test_a_tally_from_before_the_span_falls_back_to_the_makespan(tmp_path):
    """A run that kept no table is summarised from its tally; one written before ``span`` was tallied takes the
    makespan as its span."""
    sums = Tally().add(pd.DataFrame(LATE, columns=SCHEMAS["iterations"].names)).sums
    assert sums["span"] == 2.0 and sums["carried"] == 3
    kept = summarize(load_run(write_run(tmp_path / "kept", LATE, workers=2)))
    assert summarize(load_run(write_run(tmp_path / "tally", [], workers=2, tally=sums))) == kept
    old = {k: v for k, v in sums.items() if k not in ("span", "samples", "carried_samples")}
    before = summarize(load_run(write_run(tmp_path / "old", [], workers=2, tally=old)))
    assert before.span == 6.0 and before.samples_per_s == pytest.approx(3 * 10 / 6.0)
    assert before.raw_samples_per_s == kept.raw_samples_per_s


def test_solo_with_a_persistent_straggler_is_credited_only_what_its_rounds_carried(tmp_path):
    """2 workers, worker 1 2.5 times slower (0.25 s an iteration against 0.1 s), no periodic sync, 40 iterations, a
    free network. sync: 40 rounds of 0.25 s, makespan 10 s. eager-solo: worker 0 triggers round n at 0.1 (n + 1) s,
    so the 40 rounds end at 4 s; worker 1's call k, posted at 0.25 (k + 1) s, goes into the first round starting
    at or after it, which exists for k <= 15: 40 + 16 = 56 carried worker-iterations, while worker 1 runs on to
    10 s. Raw throughput (80 worker-iterations over 10 s) cannot tell the two apart."""
    keys = {
        "cluster.workers": 2,
        "imbalance.kind": "persistent",
        "imbalance.factors": {"1": 2.5},
        "algorithm.sync_period": 0,
        "iterations": 40,
        "workload.compute": {"dist": "constant", "mean": 0.1},
        "workload.batch": 10,
        "network.alpha": 0.0,
        "network.beta": 0.0,
    }
    sync = summarize(load_run(simulate(scenario(**keys, **{"algorithm.name": "sync"}), tmp_path / "sync")))
    solo_scenario = scenario(**keys, **{"algorithm.name": "eager-solo"})
    solo = summarize(load_run(simulate(solo_scenario, tmp_path / "solo")))
    assert sync.makespan == pytest.approx(10.0) and sync.span == pytest.approx(10.0)
    assert sync.samples_per_s == pytest.approx(80 * 10 / 10.0) == sync.raw_samples_per_s
    assert solo.makespan == pytest.approx(10.0) and solo.span == pytest.approx(4.0)
    assert solo.raw_samples_per_s == pytest.approx(sync.raw_samples_per_s)
    assert solo.samples_per_s == pytest.approx(56 * 10 / 4.0)
    bare = summarize(load_run(simulate(solo_scenario, tmp_path / "bare", tables=())))  # from meta.json's tally
    assert bare == solo


#: the algorithms whose gradients enter the models only with the round or server update that carries them
BY_ROUND = {"sync", "eager-solo", "eager-majority", "quorum", "async-ps", "preempt"}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_says_when_it_applies_a_gradient(algorithm):
    """docs/semantics.md, *Applied gradients*: model averaging, gossip and local steps step the worker's own
    replica with its gradient (``release``); gradient averaging and the parameter server apply it by rounds."""
    assert meta(plan(scenario(**{"algorithm.name": algorithm})), "sim")["applied"] == (
        "round" if algorithm in BY_ROUND else "release"
    )


def test_wagma_deposits_replaced_unread_still_count_as_applied(tmp_path):
    """Under heavy-tailed compute a WAGMA deposit is often replaced by the worker's next one before any group read
    it (``round`` -1); the gradient of that iteration still stepped its worker's model, so applied throughput is the
    raw one. A dropped eager-solo gradient, by contrast, never enters a model."""
    keys = {
        "cluster.workers": 8,
        "iterations": 40,
        "workload.compute": {"dist": "lognormal", "mean": 0.1, "cv": 1.0},
        "algorithm.group_size": 2,
        "algorithm.sync_period": 10,
        "algorithm.late": "drop",
    }
    wagma = load_run(simulate(scenario(**keys, **{"algorithm.name": "wagma"}), tmp_path / "wagma"))
    assert (wagma.iterations["round"] == -1).any()
    s = summarize(wagma)
    assert s.samples_per_s == s.raw_samples_per_s and s.span == s.makespan
    solo = load_run(simulate(scenario(**keys, **{"algorithm.name": "eager-solo"}), tmp_path / "solo"))
    carried = int((solo.iterations["round"] >= 0).sum())
    assert carried < len(solo.iterations)
    assert summarize(solo).samples_per_s == pytest.approx(carried * 128 / summarize(solo).span)


def test_wait_fraction(run):
    assert wait_fraction(run) == pytest.approx(2.0 / 12.0)  # waits 1 + 1 of 2 + 2 + 2 + 2 + 4 seconds


def test_staleness_histogram_counts_every_value_and_uncarried_as_minus_one(run):
    assert staleness_histogram(run).to_dict() == {-1: 1, 0: 3, 2: 1}
    m = run_metrics(run)
    assert m["mean_staleness"] == pytest.approx(2 / 4) and m["max_staleness"] == 2  # over the 4 carried ones


def test_time_to_loss_uses_the_averaged_model(run):
    assert to_target(run, 0.5) == (3.0, 30.0)  # the worker-0 evaluation at loss 0 does not count
    assert to_target(run, 1.0) == (1.0, 10.0)
    assert all(math.isnan(v) for v in to_target(run, 0.1))
    m = run_metrics(run, target_loss=0.5)
    assert (m["time_to_loss"], m["iterations_to_loss"]) == (3.0, 30.0)


def test_time_to_loss_without_an_averaged_model_averages_the_workers(tmp_path):
    evals = [(1.0, 10, 0, 1.0, 0.0), (1.2, 10, 1, 0.5, 0.0), (2.0, 20, 0, 0.4, 0.0), (2.0, 20, 1, 0.2, 0.0)]
    run = load_run(write_run(tmp_path / "run", ROWS, workers=3, evals=evals))
    assert model_evals(run)["loss"].tolist() == pytest.approx([0.75, 0.3])
    assert to_target(run, 0.5) == (2.0, 20.0)


def test_timing_only_run_has_no_target(tmp_path):
    run = load_run(write_run(tmp_path / "run", ROWS, workers=3))
    assert all(math.isnan(v) for v in to_target(run, 10.0))


def test_tables_have_the_scenario_keys_as_columns(tmp_path):
    write_run(tmp_path / "a", ROWS, workers=3, algorithm="sync")
    write_run(tmp_path / "b", ROWS, workers=3, algorithm="eager-solo", source="real")
    runs = load_runs([tmp_path])
    keys = keys_table(runs)
    assert {"run", "source", "finished", "algorithm.name", "cluster.workers", "workload.batch", "seed"} <= set(keys)
    assert keys["source"].tolist() == ["sim", "real"] and varying_keys(keys) == ["algorithm.name"]
    table = summary_table(runs)
    assert table["worker_iterations"].tolist() == [5, 5] and table["iterations"].tolist() == [2, 2]
    rows = tidy(runs, "iterations")
    assert len(rows) == 10 and list(rows.columns[:3]) == ["run", "algorithm.name", "seed"]
    assert flatten({"a": {"b": [1, 2], "c": 3}}) == {"a.b": (1, 2), "a.c": 3}


def test_imports_stay_light_and_one_way():
    """analysis imports neither the simulator nor matplotlib (until a figure is to be drawn: the plots and the plot
    command); simulating and sweeping import neither matplotlib nor mpi4py (only under MPI) nor torch."""
    code = (
        "import sys, stragglerlab.analysis.collection, stragglerlab.analysis.compare, stragglerlab.analysis.style, "
        "stragglerlab.simulator.sweep, stragglerlab.simulator.commands.sweep, "
        "stragglerlab.simulator.commands.simulate; "
        "bad = [m for m in ('matplotlib', 'mpi4py', 'torch') if m in sys.modules]; assert not bad, bad"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0
    leaks = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, stragglerlab.analysis.collection, stragglerlab.analysis.compare, "
            "stragglerlab.analysis.plots; print([m for m in sys.modules if m.startswith('stragglerlab.simulator')])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert leaks.stdout.strip() == "[]"


def test_throughput_counts_the_samples_each_worker_iteration_processed(tmp_path):
    """A worker-iteration cut short (preemption) counts the samples it processed, not the batch: worker 1's second
    iteration processed 4 of its 10."""
    rows = [(*row[:-1], 4) if row[:2] == (1, 1) else row for row in LATE]
    m = run_metrics(load_run(write_run(tmp_path / "run", rows, workers=2, batch=10, applied="release")))
    assert m["raw_samples_per_s"] == pytest.approx((5 * 10 - 6) / 6.0)
