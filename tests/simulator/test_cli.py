"""The ``stragglerlab`` command: simulate with --compare, --set and -o; examples."""

import re

import pytest

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.cli import main


def test_simulate_compare_prints_summary_and_writes_both_folders(tmp_path, capsys):
    code = main(
        [
            "simulate",
            "--example",
            "eager-injected",
            "--set",
            "iterations=60",
            "--set",
            "cluster.workers=16",
            "--compare",
            "sync",
            "-o",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    header = out.splitlines()[1].split()
    assert header[:2] == ["algorithm", "samples/s"] and "speedup" in header and "fresh" in header
    solo = next(line for line in out.splitlines() if line.startswith("eager-solo"))
    sync = next(line for line in out.splitlines() if line.startswith("sync"))
    assert sync.endswith("1.000x")
    speedup = float(re.search(r"([\d.]+)x$", solo).group(1))
    a, b = load_run(tmp_path / "out" / "eager-solo"), load_run(tmp_path / "out" / "sync")

    def applied(run):  # carried worker-iterations per second over the span of the rounds (sync: all, the makespan)
        carried = run.iterations[run.iterations["round"] >= 0]
        return len(carried) / carried["t_done"].max()

    assert speedup == round(applied(a) / applied(b), 3)
    assert speedup > 1.2  # the injected delays hurt sync far more than solo
    # the comparison runs on the same seed: the same compute times
    assert (a.iterations.compute.to_numpy() - b.iterations.compute.to_numpy()).max() < 1e-12


def test_simulate_one_run_writes_the_folder_itself(tmp_path, capsys):
    scenario = tmp_path / "s.toml"
    scenario.write_text('[cluster]\nworkers = 4\n[algorithm]\nname = "wagma"\ngroup_size = 2\n')
    assert main(["simulate", str(scenario), "--set", "iterations=10", "-o", str(tmp_path / "run")]) == 0
    run = load_run(tmp_path / "run")
    assert run.meta["scenario"]["algorithm"]["name"] == "wagma" and len(run.iterations) == 40
    assert "wagma" in capsys.readouterr().out


def test_examples_lists_one_line_each(capsys):
    assert main(["examples"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 5 and all(len(line.split(None, 1)) == 2 for line in lines)


def test_usage_errors(capsys):
    assert main([]) == 2
    for argv in (["simulate", "--example", "eager-injected", "--compare", "nope"], ["simulate"], ["nope"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
