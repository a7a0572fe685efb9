"""Scenario loading: every key, overrides, and one-line errors with exit status 2."""

import subprocess
import sys

import numpy as np
import pytest

from stragglerlab.cli import main
from stragglerlab.simulator.catalog import example_path, examples
from stragglerlab.simulator.scenario import ScenarioError, load, to_dict

FULL = """
name = "full"
seed = 3
iterations = 10
[cluster]
workers = 16
workers_per_node = 4
[network]
alpha = 1e-6
beta = 2e-10
gamma = 1e-11
allreduce = "tree"
intra_alpha = 1e-7
intra_beta = 1e-11
[workload]
model = "none"
params = 1000
batch = 32
device = "cuda:0"
compute = { dist = "gamma", mean = 0.1, cv = 0.2, shape = 3.0 }
[imbalance]
kind = "persistent"
slow = [1, 2]
delay = 0.1
mode = "work"
factors = { 3 = 1.5, 7 = 2 }
[algorithm]
name = "lsgd"
sync_period = 5
late = "drop"
divide_by = "contributors"
group_size = 4
period = 8
global_period = 32
pull = 0.2
global_pull = 0.05
lr = 0.1
momentum = 0.9
"""


def test_every_key_of_design_is_loaded():
    s = load(text=FULL)
    assert s.cluster.workers_per_node == 4 and s.network.allreduce == "tree" and s.network.intra_beta == 1e-11
    assert s.workload.device == "cuda:0" and s.workload.compute.shape == 3.0
    assert s.imbalance.factors == {3: 1.5, 7: 2.0} and s.imbalance.mode == "work"
    assert s.algorithm.late == "drop" and s.algorithm.global_pull == 0.05 and s.algorithm.momentum == 0.9
    # the resolved form round-trips
    from stragglerlab.simulator.scenario import from_dict

    assert from_dict(to_dict(s)) == s


def test_overrides_are_validated_like_the_file():
    s = load(
        text=FULL, overrides=["algorithm.name=wagma", "cluster.workers=32", "workload.compute.mean=0.5", "name=renamed"]
    )
    assert (s.algorithm.name, s.workers, s.workload.compute.mean, s.name) == ("wagma", 32, 0.5, "renamed")
    with pytest.raises(ScenarioError, match=r"^--set: cluster.workers = -1: must be a positive integer$"):
        load(text=FULL, overrides=["cluster.workers=-1"])
    with pytest.raises(ScenarioError, match="^--set: unknown key algorithm.nme"):
        load(text=FULL, overrides=["algorithm.nme=sync"])
    with pytest.raises(ScenarioError, match="expected key=value"):
        load(text=FULL, overrides=["algorithm.name"])


def test_every_example_loads_and_there_are_five():
    names = examples()
    assert {"eager-injected", "eager-balanced", "wagma-1024", "lsgd-4x4", "heavy-tail-256"} <= set(names)
    for name in names:
        s = load(example_path(name))
        assert s.name == name and names[name]
    inj = load(example_path("eager-injected"))
    assert (inj.workers, inj.workload.compute.mean, inj.imbalance.slow, inj.imbalance.delay) == (64, 0.3, (1, 2), 0.32)
    assert load(example_path("eager-balanced")).imbalance.kind == "none"
    w = load(example_path("wagma-1024"))
    assert (w.workers, w.algorithm.group_size, w.algorithm.name) == (1024, 8, "wagma")
    ls = load(example_path("lsgd-4x4"))
    assert (ls.workers, ls.cluster.workers_per_node, ls.algorithm.name) == (16, 4, "lsgd")
    h = load(example_path("heavy-tail-256"))
    assert (h.workers, h.workload.compute.dist) == (256, "lognormal")


MALFORMED = [
    ("[cluster]\nworkrs = 4", "unknown key cluster.workrs"),
    ("[cluster]\nworkers = -4", "cluster.workers = -4: must be a positive integer"),
    ("[cluster]\nworkers = 2.5", "cluster.workers = 2.5: must be a positive integer"),
    ('[algorithm]\nname = "hogwild"', 'algorithm.name = "hogwild": must be one of sync'),
    (
        '[algorithm]\nname = "wagma"\ngroup_size = 16',
        "algorithm.group_size = 16: must be from 1 to cluster.workers = 8",
    ),
    ('[algorithm]\nname = "wagma"\ngroup_size = -1', "algorithm.group_size = -1: must be an integer from 1"),
    ('[imbalance]\nkind = "trace"\nfile = "missing.npy"', "no such file"),
    ('[imbalance]\nkind = "trace"\nfile = "WRONG"', "shape (3, 5) must be (iterations, 8)"),
    ('[imbalance]\nkind = "trace"', "imbalance.file = None: must be given for kind = trace"),
    ("[network]\nalpha = -1e-6", "network.alpha = -1e-06: must be a number >= 0"),
    ('[network]\nallreduce = "butterfly"', 'network.allreduce = "butterfly": must be one of ring'),
    ('[workload]\ncompute = { dist = "weibull", mean = 1 }', "workload.compute.dist"),
    ('[workload]\ncompute = { dist = "lognormal", mean = 1 }', "workload.compute.cv = None: must be given"),
    ('[workload]\ncompute = { dist = "pareto", mean = 1, shape = 0.5 }', "workload.compute.shape = 0.5"),
    ('[imbalance]\nkind = "random-delay"\nslow = [3, 1]', "imbalance.slow = [3, 1]: must be [min, max]"),
    ('[imbalance]\nkind = "random-delay"\nslow = [1, 9]', "imbalance.slow = [1, 9]: must be a range within"),
    ('[imbalance]\nkind = "persistent"\nfactors = { 9 = 2.0 }', "imbalance.factors"),
    ('[algorithm]\nlate = "keep"', 'algorithm.late = "keep": must be one of accumulate, drop'),
    ("[algorithm]\nmomentum = 1.5", "algorithm.momentum = 1.5: must be a number in [0, 1)"),
    ("iterations = 0", "iterations = 0: must be a positive integer"),
    ('seed = "one"', 'seed = "one": must be an integer >= 0'),
    ("cluster = 4", "cluster = 4: must be a table"),
    ("[cluster\nworkers = 4", "not valid TOML"),
    ("[cluster]\nworkers = 4\nworkers_per_node = 8", "cluster.workers_per_node = 8"),
    ("[algorithm]\nsync_period = true", "algorithm.sync_period = True: must be an integer >= 0"),
    ("[workload]\nbuckets = 0", "workload.buckets = 0: must be a positive integer"),
    ("[workload]\nbackward = 0", "workload.backward = 0: must be a number in (0, 1]"),
    ("[workload]\nbackward = 1.5", "workload.backward = 1.5: must be a number in (0, 1]"),
    ("[network]\noverhead = -1e-6", "network.overhead = -1e-06: must be a number >= 0"),
    ("[workload]\nupdate = -0.1", "workload.update = -0.1: must be a number >= 0"),
    ('[workload]\ncall = { dist = "lognormal", mean = 1e-4 }', "workload.call.cv = None: must be given"),
    ("[workload]\ncall = { mean = nan }", "workload.call.mean = nan: must be a number > 0"),
    ("[workload]\ncall = { men = 1e-4 }", "unknown key workload.call.men"),
    ("[workload]\ncall = 1e-4", "workload.call = 0.0001: must be a table"),
    ("duration = -1", "duration = -1: must be a number >= 0"),
    ('name = "../../elsewhere"', 'name = "../../elsewhere": must be a folder name'),
    ('name = "/abs/path"', 'name = "/abs/path": must be a folder name'),
    ('name = ".."', 'name = "..": must be a folder name'),
    ('name = "a\\nb"', "must be a folder name: up to 200 bytes, no / or control characters"),
    (f'name = "{"é" * 101}"', "must be a folder name: up to 200 bytes"),
    (
        '[imbalance]\nkind = "random-delay"\ndraw = "twice"',
        'imbalance.draw = "twice": must be one of count, independent',
    ),
]


@pytest.fixture
def wrong_trace(tmp_path):
    np.save(tmp_path / "wrong.npy", np.ones((3, 5)))
    return tmp_path / "wrong.npy"


@pytest.mark.parametrize("text,message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_scenarios_give_one_line_and_status_2(tmp_path, capsys, wrong_trace, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text.replace("WRONG", str(wrong_trace)))
    assert main(["simulate", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"stragglerlab simulate: error: {path}") or "--set" in err
    assert message in err
    assert not (tmp_path / "out").exists()


def test_errors_in_a_real_process_have_no_traceback(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[cluster]\nworkers = 0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "stragglerlab.cli", "simulate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr == f"stragglerlab simulate: error: {path}: cluster.workers = 0: must be a positive integer\n"
    proc = subprocess.run(
        [sys.executable, "-m", "stragglerlab.cli", "simulate", "--example", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "no such example" in proc.stderr and proc.stderr.count("\n") == 1


PER_ALGORITHM = """
[cluster]
workers = 8
[network]
allreduce = "rabenseifner"
beta = 1e-10
[algorithm]
name = "eager-solo"
[per_algorithm.eager-solo.network]
allreduce = "recursive-doubling"
[per_algorithm.sync.network]
allreduce = "ring"
beta = 4e-10
table = "nccl.csv"
[per_algorithm.sgp.algorithm]
push_peers = 2
"""


def per_algorithm_file(tmp_path):
    (tmp_path / "nccl.csv").write_text("kind,ranks,bytes,seconds\nsync,8,100,0.001\nsync,8,1000000000,1.0\n")
    path = tmp_path / "s.toml"
    path.write_text(PER_ALGORITHM)
    return path


def test_an_algorithm_runs_with_its_own_keys_and_the_others_with_the_general_ones(tmp_path):
    s = load(per_algorithm_file(tmp_path))
    assert s.network.allreduce == "recursive-doubling" and s.network.beta == 1e-10  # eager-solo's own, then general
    sync = s.replace("--compare sync", **{"algorithm.name": "sync"})
    assert (sync.network.allreduce, sync.network.beta) == ("ring", 4e-10)
    assert sync.network.table == tmp_path / "nccl.csv"  # a file named in the table: from the scenario's folder
    sgp = sync.replace("--compare sgp", **{"algorithm.name": "sgp"})
    # sync's keys do not leak into the next algorithm: it starts again from the general values
    assert (sgp.network.allreduce, sgp.network.beta, sgp.network.table) == ("rabenseifner", 1e-10, None)
    assert sgp.algorithm.push_peers == 2
    assert sgp.replace("--compare eager-solo", **{"algorithm.name": "eager-solo"}) == s


def test_the_stored_scenario_holds_the_values_run_and_round_trips(tmp_path):
    from stragglerlab.simulator.scenario import from_dict

    sync = load(per_algorithm_file(tmp_path), ["algorithm.name=sync"])
    stored = to_dict(sync)
    assert stored["network"]["allreduce"] == "ring"  # what meta.json says the run used
    assert stored["per_algorithm"]["sync"]["network"]["table"] == str(tmp_path / "nccl.csv")
    again = from_dict(stored)
    assert again == sync
    # and from the stored form, another algorithm still gets the general values back
    assert again.replace("x", **{"algorithm.name": "sgp"}).network.allreduce == "rabenseifner"


def test_changing_an_algorithms_own_key_leaves_the_scenario_alone(tmp_path):
    s = load(per_algorithm_file(tmp_path), ["algorithm.name=sgp"])
    fewer = s.replace("x", **{"per_algorithm.sgp.algorithm.push_peers": 1})
    assert fewer.algorithm.push_peers == 1
    assert s.per_algorithm["sgp"]["algorithm"]["push_peers"] == 2 and to_dict(s)["algorithm"]["push_peers"] == 2
    stored = to_dict(s)
    stored["per_algorithm"]["sgp"]["algorithm"]["push_peers"] = 1  # a copy: the scenario is not changed through it
    assert s.per_algorithm["sgp"]["algorithm"]["push_peers"] == 2


def test_set_reaches_an_algorithms_own_keys(tmp_path):
    s = load(per_algorithm_file(tmp_path), ["per_algorithm.sync.network.beta=1e-9", "algorithm.name=sync"])
    assert s.network.beta == 1e-9
    # a general --set does not override an algorithm's own key, only the general value the others run with
    s = load(per_algorithm_file(tmp_path), ["network.allreduce=tree", "algorithm.name=sync"])
    assert s.network.allreduce == "ring" and s.replace("x", **{"algorithm.name": "sgp"}).network.allreduce == "tree"


@pytest.mark.parametrize(
    "table,message",
    [
        ("per_algorithm = 3", "per_algorithm = 3: must be a table of algorithm name"),
        ("[per_algorithm.bogus.network]\nbeta = 1", "per_algorithm.bogus: not an algorithm (choose from sync"),
        ("[per_algorithm.sync.workload]\nbatch = 1", "per_algorithm.sync.workload: only network and algorithm keys"),
        ("[per_algorithm.sync.network]\nbeta = -1", "per_algorithm.sync.network.beta = -1: must be a number >= 0"),
        ("[per_algorithm.sync.network]\nbta = 1", "unknown key per_algorithm.sync.network.bta"),
        ("[per_algorithm.sync.algorithm]\ntopology = 'ring'", "algorithm.topology: sync does not read it"),
        ("[per_algorithm.sgp.algorithm]\nname = 'sync'", "algorithm.name: the table's name is the algorithm"),
    ],
)
def test_per_algorithm_errors_are_one_line(table, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(")) as err:
        load(text=table)
    assert "\n" not in str(err.value)


def test_compare_runs_each_algorithm_with_its_own_keys(tmp_path, monkeypatch, capsys):
    import json

    path = per_algorithm_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", str(path), "-o", "out", "--compare", "sync,sgp", "--json"]) == 0
    runs = {r["algorithm"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    stored = {name: json.loads((tmp_path / "out" / name / "meta.json").read_text())["scenario"] for name in runs}
    assert stored["eager-solo"]["network"]["allreduce"] == "recursive-doubling"
    assert stored["sync"]["network"]["allreduce"] == "ring" and stored["sync"]["network"]["beta"] == 4e-10
    assert stored["sgp"]["network"]["allreduce"] == "rabenseifner" and stored["sgp"]["algorithm"]["push_peers"] == 2
