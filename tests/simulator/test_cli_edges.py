"""The small edges of the command line: an empty ``--compare`` or ``-o``, ``validate --repeat`` checked before any
work, a device checked when the scenario loads, and progress bars drawn only on a terminal."""

from __future__ import annotations

import pytest

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.cli import main
from tests.simulator.test_cli import one_line_error

SMALL = ["--example", "eager-injected", "--set", "cluster.workers=4", "--set", "iterations=10"]


@pytest.mark.parametrize("names", ["", ",,", " , "])
def test_a_compare_that_names_no_algorithm_is_refused(names, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["simulate", *SMALL, "--compare", names, "-o", str(tmp_path / "run")])
    assert done.value.code == 2
    assert "names no algorithm" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", *SMALL],
        ["sweep", *SMALL, "--grid", "algorithm.name=sync"],
        ["examples", "eager-injected"],
        ["plot", "runs", "--kind", "throughput"],
        ["validate", "runs"],
        ["calibrate", "--np", "2"],
        ["run", *SMALL],
        ["slurm", *SMALL],
    ],
)
def test_an_empty_output_name_is_refused_not_taken_as_the_current_folder(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        main([*argv, "-o", ""])
    assert done.value.code == 2
    assert "an empty name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_validate_checks_its_repeats_before_simulating_anything(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["simulate", *SMALL, "-o", str(run)]) == 0
    capsys.readouterr()
    out = tmp_path / "validation"
    one_line_error(
        capsys, ["validate", str(run), "--repeat", "2", "-o", str(out)], "1 trace-driven runs", "groups of 2"
    )
    assert not out.exists()


def test_a_device_is_checked_when_the_scenario_loads(tmp_path, capsys):
    for device in ("cuda:abc", "cuda:", "gpu", "cuda:-1"):
        one_line_error(capsys, ["simulate", *SMALL, "--set", f"workload.device='{device}'"], "workload.device")
    assert main(["simulate", *SMALL, "--set", "workload.device='cuda:1'", "-o", str(tmp_path / "run")]) == 0
    assert load_run(tmp_path / "run").meta["scenario"]["workload"]["device"] == "cuda:1"


def test_the_sweep_draws_its_progress_bar_only_on_a_terminal(tmp_path, capsys):
    argv = ["sweep", *SMALL, "--grid", "algorithm.name=sync,eager-solo", "-o", str(tmp_path / "sweep")]
    assert main(argv) == 0
    err = capsys.readouterr().err  # pytest's captured stderr is not a terminal
    assert "sweep:" not in err and "cell/s" not in err and "\r" not in err, err


@pytest.mark.parametrize("window", ["nan:inf", "0:inf", "-inf:1", "nan:nan", "2:1"])
def test_a_window_that_is_not_two_finite_ordered_numbers_is_refused(window, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["plot", str(tmp_path), "--kind", "timeline", f"--window={window}"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "finite, with START < END" in err and "Traceback" not in err


def test_a_run_forced_past_the_memory_estimate_that_runs_out_of_memory_is_one_line(tmp_path, capsys):
    argv = ["simulate", *SMALL, "--set", f"cluster.workers={2**62}", "--force", "-o", str(tmp_path / "run")]
    assert main(argv) == 2
    estimate, error = capsys.readouterr().err.strip().splitlines()  # the estimate a large run prints, then the error
    assert "estimated about" in estimate and error.startswith("stragglerlab simulate: error: out of memory")
