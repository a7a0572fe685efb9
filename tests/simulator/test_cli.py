"""The ``stragglerlab`` command: simulate with --compare, --set and -o; examples."""

import json
import re
import subprocess
import sys

import pytest

from stragglerlab.analysis.runfolder import load_run
from stragglerlab.cli import main
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.algorithms.wagma import WagmaRules
from stragglerlab.simulator.catalog import example_path
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.provenance import git_state
from stragglerlab.simulator.scenario import load


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


def test_an_example_is_printed_or_written_to_edit_and_run(tmp_path, capsys):
    assert main(["examples", "eager-injected"]) == 0
    text = capsys.readouterr().out
    assert text == example_path("eager-injected").read_text()
    mine = tmp_path / "edit" / "my.toml"
    assert main(["examples", "eager-injected", "-o", str(mine)]) == 0
    assert mine.read_text() == text and f"stragglerlab simulate {mine}" in capsys.readouterr().out
    mine.write_text(text.replace("workers = 64", "workers = 4"))
    one_line_error(capsys, ["examples", "eager-injected", "-o", str(mine)], "exists; give --force")
    assert "workers = 4" in mine.read_text()
    assert main(["simulate", str(mine), "--set", "iterations=3", "-o", str(tmp_path / "run")]) == 0
    assert load_run(tmp_path / "run").meta["scenario"]["cluster"]["workers"] == 4
    assert main(["examples", "wagma-1024", "-o", str(mine), "--force"]) == 0 and "wagma" in mine.read_text()
    one_line_error(capsys, ["examples", "nope"], "nope: no such example (known: adpsgd-64")
    one_line_error(capsys, ["examples", "-o", str(tmp_path / "x.toml")], "name the example to write")


def test_algorithms_lists_every_record_with_its_keys(capsys):
    assert main(["algorithms"]) == 0
    out = capsys.readouterr().out
    starts = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")]
    assert starts == list(algorithms.names())
    for record in algorithms.RECORDS:
        block = out.split(record.name, 1)[1]
        assert all(f"{key.name} = " in block for key in record.keys)
    assert 'late = "accumulate"' in out and "--backend native or torch" in out


def test_usage_errors(capsys):
    assert main([]) == 2
    for argv in (["simulate", "--example", "eager-injected", "--compare", "nope"], ["profile"], ["nope"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


SMALL = ["--example", "eager-injected", "--set", "iterations=5", "--set", "cluster.workers=4"]


def mark_real(folder):
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "source": "real"}))


def test_simulate_refuses_an_existing_run_folder_and_replaces_it_only_with_force(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["simulate", *SMALL, "-o", out]) == 0
    stamp = (tmp_path / "run" / "meta.json").read_text()
    assert main(["simulate", *SMALL, "--set", "iterations=3", "-o", out]) == 2
    assert "holds a run already; give --force" in capsys.readouterr().err
    assert (tmp_path / "run" / "meta.json").read_text() == stamp
    assert main(["simulate", *SMALL, "--set", "iterations=3", "-o", out, "--force"]) == 0
    assert len(load_run(out).iterations) == 4 * 3


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_real_run_survives_simulate_into_its_folder(tmp_path, capsys, force):
    out = tmp_path / "run"
    assert main(["simulate", *SMALL, "-o", str(out)]) == 0
    mark_real(out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert main(["simulate", *SMALL, "-o", str(out), *force]) == 2
    assert "real run, which is never replaced" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert load_run(out).meta["source"] == "real"
    # nor inside a --compare folder, where nothing runs when one of the folders is refused
    assert main(["simulate", *SMALL, "--compare", "sync", "-o", str(tmp_path / "cmp")]) == 0
    mark_real(tmp_path / "cmp" / "sync")
    solo = (tmp_path / "cmp" / "eager-solo" / "meta.json").stat().st_mtime_ns
    assert main(["simulate", *SMALL, "--compare", "sync", "-o", str(tmp_path / "cmp"), *force]) == 2
    assert (tmp_path / "cmp" / "eager-solo" / "meta.json").stat().st_mtime_ns == solo


def test_default_names_get_a_fresh_suffix(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for expected in ("eager-injected", "eager-injected-2", "eager-injected-3"):
        assert main(["simulate", *SMALL]) == 0
        assert f"run folder: runs/{expected}\n" in capsys.readouterr().out
        assert load_run(tmp_path / "runs" / expected).finished
    (tmp_path / "runs" / "eager-injected-4").write_text("a file takes the name too")
    assert main(["simulate", *SMALL, "--compare", "sync"]) == 0
    assert "run folders: runs/eager-injected-5\n" in capsys.readouterr().out


def test_compare_several_algorithms_speedups_over_the_first_one(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["simulate", *SMALL, "--set", "iterations=30", "--set", "algorithm.group_size=2"]
    argv += ["--compare", "sync,wagma", "--compare", "local-sgd"]
    assert main([*argv, "-o", str(out), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["baseline"] == "sync" and record["workers"] == 4 and record["iterations"] == 30
    runs = {r["algorithm"]: r for r in record["runs"]}
    assert list(runs) == ["eager-solo", "sync", "wagma", "local-sgd"]
    assert runs["sync"]["speedup"] == 1.0 and runs["sync"]["final_loss"] is None  # NaN is null
    for name, r in runs.items():
        assert r["folder"] == str(out / name)
        assert r["speedup"] == pytest.approx(r["samples_per_s"] / runs["sync"]["samples_per_s"])
    assert main([*argv, "-o", str(tmp_path / "text")]) == 0
    text = capsys.readouterr().out
    assert "speedup over sync" in text.splitlines()[0]
    assert next(line for line in text.splitlines() if line.startswith("sync")).endswith("1.000x")


def test_wagma_fits_any_worker_count_by_default_and_errors_name_what_asked(tmp_path, capsys):
    # group_size 0 (the default) is min(8, P): WAGMA runs on 4 workers with nothing set
    out = tmp_path / "cmp"
    assert main(["simulate", *SMALL, "--compare", "wagma", "-o", str(out)]) == 0
    assert set(load_run(out / "wagma").rounds.query("kind == 'group'")["contributors"]) <= {1, 2, 3, 4}
    for workers, size in ((1024, 8), (4, 4)):
        s = load(
            example_path("wagma-1024"), ["algorithm.group_size=0", f"cluster.workers={workers}", "imbalance.slow=1"]
        )
        assert WagmaRules(s, cost_model(s)).group_size == size
    # a group size the user set that does not fit: the error names --compare, not an internal call or the file
    argv = ["simulate", *SMALL, "--set", "algorithm.group_size=16", "--compare", "wagma", "-o", str(tmp_path / "x")]
    one_line_error(capsys, argv, "--compare wagma: algorithm.group_size = 16", "cluster.workers = 4, or 0 for 4")


def test_meta_records_the_command_line_and_the_checkout(tmp_path, monkeypatch):
    argv = ["stragglerlab", "simulate", *SMALL, "-o", str(tmp_path / "run")]
    monkeypatch.setattr(sys, "argv", argv)
    assert main(argv[1:]) == 0
    meta = load_run(tmp_path / "run").meta
    assert meta["command"] == argv
    state = git_state()
    if state is None:
        assert "git" not in meta
    else:
        assert meta["git"] == state and len(state["commit"]) == 40 and isinstance(state["dirty"], bool)


def one_line_error(capsys, argv: list[str], *words: str) -> None:
    """``stragglerlab argv`` fails with exit status 2 and one line on stderr naming ``words``, no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def test_unwritable_and_invalid_outputs_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    one_line_error(capsys, ["simulate", *SMALL, "-o", "/proc/stragglerlab-x"], "cannot create the folder")
    one_line_error(capsys, ["simulate", *SMALL, "-o", str(tmp_path / "file" / "sub")], "cannot create the folder")
    one_line_error(capsys, ["simulate", *SMALL, "-o", str(tmp_path / "file")], "not a folder")


def test_a_name_that_is_not_one_folder_name_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for name in ("../../outside", str(tmp_path / "abs"), "x" * 300):
        one_line_error(capsys, ["simulate", *SMALL, "--set", f"name={name}"], "--set: name = ", "a folder name")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["work"]
    assert main(["simulate", *SMALL, "--set", "name=my run (2)"]) == 0  # anything else names one folder in runs/
    assert load_run(tmp_path / "work" / "runs" / "my run (2)").finished


def test_unreadable_scenarios_and_traces_are_one_line_errors(tmp_path, capsys):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(bytes(range(256)) * 4)
    one_line_error(capsys, ["simulate", str(binary)], "binary.toml", "not a text file")
    one_line_error(capsys, ["simulate", str(tmp_path / "absent.toml")], "cannot read the scenario")
    trace = ["--set", "imbalance.kind=trace", "--set", "cluster.workers=4"]
    (tmp_path / "t.npy").write_bytes(b"\x93NUMPY\xff\xff garbage")
    (tmp_path / "t.csv").write_bytes(b"0.1,0.2\n\xff\xfe\x00")
    (tmp_path / "dir.npy").mkdir()
    for name in ("t.npy", "t.csv", "dir.npy"):
        one_line_error(capsys, ["simulate", *SMALL, *trace, "--set", f"imbalance.file={tmp_path / name}"], name)


def test_what_no_check_foresaw_is_one_line_too(tmp_path, capsys):
    # a model that is not a torch workload function, a file that never ends, names longer than the system allows
    for model, words in (
        ("math:pi", ("math:pi", "pi is a float, not a function")),
        ("os:getcwd", ("os:getcwd", "getcwd(seed) failed (TypeError")),
        (":", ('workload.model = ":"', "module:function")),
    ):
        one_line_error(capsys, ["simulate", *SMALL, "--set", f"workload.model={model}"], *words)
    one_line_error(capsys, ["simulate", "/dev/zero"], "/dev/zero: larger than 16 MiB")
    long = str(tmp_path / ("a" * 300))
    trace = ["--set", "imbalance.kind=trace", "--set", f"imbalance.file={long}.npy"]
    for argv in (
        ["simulate", f"{long}.toml"],
        ["simulate", *SMALL, "-o", long],
        ["simulate", *SMALL, *trace],
        ["sweep", *SMALL, "-o", long],
        ["plot", long, "--kind", "throughput", "-o", str(tmp_path / "f.pdf")],
    ):
        one_line_error(capsys, argv, "aaaa", "too long")


def test_what_cannot_give_a_meaningful_summary_is_refused(tmp_path, capsys):
    one_line_error(capsys, ["simulate", *SMALL, "--target-loss", "0.1"], "needs a model to train")
    model = ["--set", "workload.model=hyperplane"]
    one_line_error(capsys, ["simulate", *SMALL, *model, "--target-loss", "nan"], "--target-loss nan: must be a finite")
    huge = ["--set", "workload.compute.mean=1e308", "-o", str(tmp_path / "huge")]
    one_line_error(capsys, ["simulate", *SMALL, *huge], "workload.compute.mean = 1e+308: must be at most 2e+11 s")
    assert not (tmp_path / "huge").exists()


def test_a_scenario_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'name = "marked"\niterations = 3\n[cluster]\nworkers = 2\n')
    assert main(["simulate", str(path), "-o", str(tmp_path / "run")]) == 0
    assert load_run(tmp_path / "run").meta["scenario"]["name"] == "marked"


def test_a_reader_that_goes_away_stops_the_listing_without_a_traceback():
    # as `stragglerlab algorithms | head -0` does: the pipe is closed before the listing is written
    proc = subprocess.Popen(
        [sys.executable, "-m", "stragglerlab.cli", "algorithms"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and err == ""
