"""Run folders: written as the run goes, identical for the same seed, readable after a kill."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import NEVER, SCHEMAS, SIMULATED, TABLES, UNFINISHED, RunWriter, load_run
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ALGORITHMS
from tests.helpers import scenario

NOISY = {
    "imbalance.kind": "random-delay",
    "imbalance.slow": [1, 2],
    "workload.compute": {"dist": "lognormal", "mean": 0.2, "cv": 0.4},
    "algorithm.group_size": 4,
    "algorithm.period": 4,
    "algorithm.global_period": 8,
}


@pytest.mark.parametrize("name", ALGORITHMS)
def test_same_seed_gives_byte_identical_tables(tmp_path, name):
    s = scenario(seed=11, **{"algorithm.name": name, **NOISY})
    a, b = simulate(s, tmp_path / "a"), simulate(s, tmp_path / "b")
    for table in TABLES:
        assert (a / f"{table}.parquet").read_bytes() == (b / f"{table}.parquet").read_bytes()
    other = simulate(s.replace(seed=12), tmp_path / "c")
    assert (a / "iterations.parquet").read_bytes() != (other / "iterations.parquet").read_bytes()


def test_run_folder_schema_and_meta(tmp_path):
    s = scenario(**{"algorithm.name": "eager-solo", **NOISY})
    run = load_run(simulate(s, tmp_path / "run"))
    assert run.finished and run.meta["source"] == "sim" and run.meta["seed"] == s.seed
    assert run.meta["scenario"]["algorithm"]["name"] == "eager-solo"
    assert {"python", "numpy", "simpy"} <= set(run.meta["versions"]) and run.meta["host"]
    assert run.meta["network"]["lower_bound"] <= run.meta["network"]["allreduce"]
    for table in TABLES:
        assert list(getattr(run, table).columns) == SCHEMAS[table].names
    it = run.iterations
    assert len(it) == 8 * 40
    assert ((it.compute - (it.t_post - it.t_start)).abs() < 1e-12).all()
    assert ((it.wait - (it.t_done - it.t_post)).abs() < 1e-12).all()
    assert (it.wait >= 0).all() and (it.compute >= 0).all()
    assert list(run.rounds["round"]) == list(range(40))


def test_a_run_folder_is_replaced_only_as_allowed_and_never_a_real_run(tmp_path):
    s = scenario()
    simulate(s, tmp_path / "run")
    with pytest.raises(UserError, match="holds a run already; give --force"):
        simulate(s.replace(iterations=5), tmp_path / "run")
    simulate(s.replace(iterations=5), tmp_path / "run", replace=SIMULATED)
    assert len(load_run(tmp_path / "run").iterations) == 8 * 5
    # a sweep resumes its own unfinished cell, and nothing else
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    (tmp_path / "run" / "meta.json").write_text(json.dumps({**meta, "finished": False}))
    with pytest.raises(UserError, match="holds a run already"):
        simulate(s, tmp_path / "run", replace=UNFINISHED)
    simulate(s.replace(iterations=5), tmp_path / "run", replace=UNFINISHED)
    with pytest.raises(UserError, match="holds a run already"):
        simulate(s.replace(iterations=5), tmp_path / "run", replace=UNFINISHED)  # finished now
    # a real run: never
    (tmp_path / "run" / "meta.json").write_text(json.dumps({**meta, "source": "real", "finished": False}))
    for replace in (NEVER, SIMULATED, UNFINISHED):
        with pytest.raises(UserError, match="real run, which is never replaced"):
            simulate(s, tmp_path / "run", replace=replace)
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["source"] == "real"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a run folder"):
        simulate(s, tmp_path / "other", replace=SIMULATED)
    with pytest.raises(UserError, match="no meta.json"):
        load_run(tmp_path / "other")
    (tmp_path / "empty").mkdir()
    simulate(s, tmp_path / "empty")


def test_a_run_killed_while_its_folder_is_made_leaves_a_folder_a_sweep_resumes(tmp_path, monkeypatch):
    s = scenario()
    make = Path.mkdir

    def killed_at_the_tables(self, *args, **kwargs):
        if self.suffix == ".parquet":
            raise KeyboardInterrupt
        return make(self, *args, **kwargs)

    # killed after meta.json, before the tables' folders: it reads as the unfinished run of its scenario
    monkeypatch.setattr(Path, "mkdir", killed_at_the_tables)
    with pytest.raises(KeyboardInterrupt):
        simulate(s, tmp_path / "run")
    monkeypatch.undo()
    assert not load_run(tmp_path / "run").finished
    simulate(s, tmp_path / "run", replace=UNFINISHED)
    assert load_run(tmp_path / "run").finished
    # killed writing its first meta.json: only the temporary name is there, and the folder counts as empty
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "meta.json.tmp").write_text("{")
    simulate(s, tmp_path / "first")
    assert load_run(tmp_path / "first").finished and not (tmp_path / "first" / "meta.json.tmp").exists()


def test_unclosed_writer_leaves_a_readable_prefix(tmp_path):
    writer = RunWriter(tmp_path / "run", {"scenario": {}}, flush_rows=10)
    for i in range(25):
        writer.add("rounds", (i, "sync", 0, float(i), float(i) + 1, 4, 4, -1))
    run = load_run(tmp_path / "run")
    assert not run.finished and list(run.rounds["round"]) == list(range(20))
    assert run.iterations.empty and list(run.iterations.columns) == SCHEMAS["iterations"].names


def test_killed_run_is_readable_and_marked_unfinished(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal
        from stragglerlab.analysis.runfolder import RECORDED, RunWriter
        from stragglerlab.simulator.plan import plan
        from stragglerlab.simulator.run import run_engine
        from tests.helpers import scenario

        s = scenario(iterations=2000, **{{"cluster.workers": 16}})
        writer = RunWriter({str(tmp_path / "run")!r}, {{"scenario": {{}}}}, flush_rows=1000)
        added = 0

        def iterations(block):  # one row at a time, as a real run's rank adds them
            global added
            for row in zip(*(block[name] for name in RECORDED)):
                writer.add("iterations", row)
                added += 1
                if added == 5500:
                    os.kill(os.getpid(), signal.SIGKILL)

        run_engine(plan(s), "reference", iterations, lambda block: writer.add_block("rounds", block))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), timeout=120)
    assert proc.returncode == -9
    run = load_run(tmp_path / "run")
    assert not run.finished
    assert 4000 <= len(run.iterations) + len(run.rounds) <= 5500 + len(run.rounds)
    assert isinstance(run.iterations, pd.DataFrame) and run.iterations.t_done.notna().all()
