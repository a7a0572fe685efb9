"""The bounds of a scenario's magnitudes, case by case: the values that hung, printed NaN or absurd figures, or ended
in a traceback are refused in one line naming the key (exit status 2); the link solver raises instead of looping."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.cli import main
from stragglerlab.simulator.bounds import HORIZON
from stragglerlab.simulator.links import Links
from tests.simulator.test_cli import one_line_error

SMALL = ["--example", "eager-injected", "--set", "cluster.workers=4", "--set", "iterations=10"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("network.beta=1e308", "network.beta = 1e+308: must be at most"),
        ("network.fabric_beta=1e308", "network.fabric_beta = 1e+308"),
        ("network.beta=1e300", "network.beta = 1e+300"),
        ("network.alpha=1e308", "network.alpha = 1e+308"),
        ("network.gamma=1e308", "network.gamma = 1e+308"),
        ("network.overhead=1e308", "network.overhead"),
        ("network.message_overhead=1e308", "network.message_overhead"),
        ("network.activation_delay=1e308", "network.activation_delay"),
        ("network.intra_beta=1e308", "network.intra_beta"),
        ("workload.compute.cv=1e308", "workload.compute.cv = 1e+308: must be a number in (0, 100]"),
        ("workload.params=9223372036854775807", "workload.params = 9223372036854775807: must be a positive integer up"),
        ("workload.batch=9223372036854775807", "workload.batch"),
        ("workload.samples=9223372036854775807", "workload.samples"),
        ("algorithm.servers=9223372036854775807", "algorithm.servers"),
        ("workload.device=cuda:abc", "workload.device"),
        ("duration=1e308", "duration"),
    ],
)
def test_an_absurd_time_or_size_is_refused_naming_its_key(setting, named, tmp_path, capsys):
    one_line_error(capsys, ["simulate", *SMALL, "--set", setting, "-o", str(tmp_path / "run")], named)
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (["imbalance.kind='persistent'", "imbalance.factors={1=1e308}"], "imbalance.factors"),
        (["imbalance.kind='persistent'", 'imbalance.factors={"²"=2}'], "imbalance.factors"),
        (["workload.call={dist='normal', mean=0.001, cv=1e308}"], "workload.call.cv"),
        (["workload.compute={dist='gamma', mean=0.3, shape=1e-300}"], "workload.compute.shape"),
        (["workload.compute={dist='lognormal', mean=0.3, cv=1e308}"], "workload.compute.cv"),
        (["network.fabric_beta=9"], "network: an exchange"),
        (
            ["imbalance.kind='random-delay'", "workload.compute.mean=9e8", "imbalance.delay=9e8"],
            "workload: an iteration's slowest compute time",
        ),
    ],
)
def test_factors_spreads_and_the_iteration_they_make_are_bounded(settings, named, tmp_path, capsys):
    sets = [x for s in settings for x in ("--set", s)]
    argv = ["simulate", *SMALL, "--set", "iterations=1000", *sets, "-o", str(tmp_path / "run")]
    one_line_error(capsys, argv, named)


def test_a_trace_of_strings_or_beyond_the_horizon_is_refused(tmp_path, capsys):
    strings, huge = tmp_path / "strings.npy", tmp_path / "huge.npy"
    np.save(strings, np.full((10, 4), "abc"))
    np.save(huge, np.full((10, 4), 1e308))
    for trace, words in ((strings, "not numbers of seconds"), (huge, "compute times of at most")):
        sets = ["--set", "imbalance.kind='trace'", "--set", f"imbalance.file='{trace}'"]
        one_line_error(capsys, ["simulate", *SMALL, *sets, "-o", str(tmp_path / "run")], "imbalance.file", words)


def test_a_data_set_beyond_the_memory_is_refused_before_it_is_made(tmp_path, capsys):
    sets = ["--set", "workload.model='hyperplane'", "--set", "workload.samples=1000000000000"]
    one_line_error(capsys, ["simulate", *SMALL, *sets, "-o", str(tmp_path / "run")], "of memory")


def test_a_time_within_the_horizon_still_runs(tmp_path, capsys):
    most = HORIZON / 10
    assert main(["simulate", *SMALL, "--set", f"network.alpha={most / 100}", "-o", str(tmp_path / "run")]) == 0
    assert "iter [s]" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_the_link_solver_raises_on_a_rate_that_never_finishes_instead_of_looping():
    links = Links(alpha=0.0, beta=1e308, intra_alpha=0.0, intra_beta=1e308)
    with pytest.raises(OverflowError, match="never finish"):
        links.arrivals(np.array([0, 1]), np.array([1, 0]), np.array([1e8, 1e8]))
    fine = Links(alpha=0.0, beta=1e-9, intra_alpha=0.0, intra_beta=1e-9)
    assert fine.arrivals(np.array([0]), np.array([1]), np.array([1e3])) == pytest.approx([1e-6])


def test_a_measured_time_or_spread_beyond_the_bound_is_refused(tmp_path, capsys):
    table = tmp_path / "rounds.csv"
    sets = ["--set", f"network.table='{table}'", "-o", str(tmp_path / "run")]
    for row, words in (
        ("sync,4,4000,0.001,1e308,0,0", "line 2: cv and stall must be finite and >= 0 (cv at most 100"),
        ("sync,4,4000,0.001,0.1,1e-300,1e308", "stall at most 1e+12"),
        ("sync,4,4000,1e300,0.1,0,0", "seconds at most 1e+12"),
    ):
        table.write_text(f"kind,ranks,bytes,seconds,cv,stalls,stall\n{row}\n")
        one_line_error(capsys, ["simulate", *SMALL, *sets], words)
