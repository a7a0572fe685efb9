"""The emulated cluster: rates as tc spells them, the testbed file, where a job's ranks go, and, as root, a 2-node
testbed end to end (up, real runs of both backends across it whose rounds cannot beat its shaped links, a run killed
with SIGKILL leaving nothing on the nodes, validate, down, nothing left); without the privileges, one line and nothing
made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stragglerlab.analysis.errors import UserError
from stragglerlab.realrun import testbed
from stragglerlab.realrun.testbed import Node
from tests.realrun.conftest import ROOT, environment, stragglerlab

PREFIX = "slt"  # not the default prefix, so that a testbed of the user's is never touched


def a_testbed(nodes: int = 8, racks: int = 1, per_node: int = 1) -> testbed.Testbed:
    per_rack = nodes // racks
    return testbed.Testbed(
        prefix=PREFIX,
        nodes=tuple(Node(f"{PREFIX}-n{i}", f"198.18.0.{i + 10}", i // per_rack) for i in range(nodes)),
        link="50mbit",
        rate=6.25e6,
        racks=racks,
        uplink="50mbit" if racks > 1 else "",
        uplink_rate=6.25e6 if racks > 1 else 0.0,
        subnet="198.18.0.0/24",
        host_address="198.18.0.1",
        switch=f"{PREFIX}-sw",
        ranks_per_node=per_node,
        tcp_cpu=1.2e-8,
    )


@pytest.mark.parametrize(
    "text, rate", [("50mbit", 6.25e6), ("1gbit", 1.25e8), ("800kbps", 8e5), ("1.5mbit", 187_500.0)]
)
def test_rates_are_read_as_tc_spells_them(text, rate):
    assert testbed.parse_rate(text) == pytest.approx(rate)


@pytest.mark.parametrize("text", ["50", "fast", "50mbits", "-5mbit", "1bit", "9tbit"])
def test_a_rate_tc_does_not_spell_or_out_of_range_is_one_line(text):
    with pytest.raises(UserError, match="--link"):
        testbed.parse_rate(text)


def test_the_testbed_file_reads_back_what_was_written(tmp_path):
    tb = a_testbed(racks=2)
    path = tmp_path / "tb.toml"
    path.write_text(testbed.to_toml(tb))
    assert testbed.load(path) == tb
    path.write_text("prefix = 3\n")
    with pytest.raises(UserError, match="not a testbed file"):
        testbed.load(path)
    with pytest.raises(UserError, match="no such testbed file"):
        testbed.load(tmp_path / "missing.toml")


def test_a_smaller_job_is_spread_over_the_racks_and_says_how_many_nodes_each_holds():
    tb = a_testbed(racks=2)
    assert [n.name for n in tb.placement(4)] == [f"{PREFIX}-n{i}" for i in (0, 1, 4, 5)]
    assert [n.rack for n in tb.placement(2)] == [0, 1]
    assert testbed.layout(tb, 4, 1) == {"cluster.nodes_per_rack": 2}
    assert testbed.layout(tb, 8, 2) == {"cluster.nodes_per_rack": 2}
    assert testbed.layout(a_testbed(), 8, 1) == {"cluster.nodes_per_rack": 0}
    with pytest.raises(UserError, match="multiple of 2"):
        tb.placement(3)
    with pytest.raises(UserError, match="has 8 nodes"):
        tb.placement(9)


def test_hydra_starts_each_nodes_ranks_through_the_launcher_over_tcp():
    tb = a_testbed(nodes=4, per_node=2)
    options = testbed.launcher_options(tb, 6, 2)
    assert options[options.index("-hosts") + 1] == f"{PREFIX}-n0:2,{PREFIX}-n1:2,{PREFIX}-n2:2"
    assert options[options.index("-launcher-exec") + 1] == str(tb.launcher)
    assert options[options.index("-iface") + 1] == tb.switch
    assert {"MPIR_CVAR_CH4_NETMOD", "FI_PROVIDER"} <= {options[i + 1] for i, o in enumerate(options) if o == "-genv"}
    with pytest.raises(UserError, match="at most 2 ranks a node"):
        testbed.launcher_options(tb, 6, 3)
    script = testbed.launcher_script(tb.state)
    assert "nsenter --net=/run/netns/" in script and "--pdeathsig KILL" in script


def test_across_a_testbed_hydra_keeps_its_cleanup_and_on_one_host_it_does_not(tmp_path, monkeypatch):
    """MPICH 5.0's hydra, without its cleanup, takes each rank's normal exit for a failure and signals the other
    nodes' proxies, some of which have just closed their sockets: mpiexec died of SIGPIPE after finished runs."""
    from stragglerlab.realrun.mpiexec import launch

    path = tmp_path / "tb.toml"
    path.write_text(testbed.to_toml(a_testbed(nodes=2)))
    monkeypatch.delenv(testbed.VARIABLE, raising=False)
    assert "-disable-auto-cleanup" in launch(2, ["run"])
    monkeypatch.setenv(testbed.VARIABLE, str(path))
    command = launch(2, ["run"])
    assert "-disable-auto-cleanup" not in command and "-launcher-exec" in command


def _privileged() -> str | None:
    """Why the end-to-end test cannot run here, or None."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux"
    for tool in ("ip", "tc", "nsenter", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


def _left(prefix: str) -> list[str]:
    return testbed.leftovers(prefix) + [f"process {p}" for p in testbed.processes(prefix)]


@pytest.mark.skipif(_privileged() is not None, reason=_privileged() or "")
def test_without_the_capabilities_up_says_which_in_one_line_and_makes_nothing():
    proc = subprocess.run(
        [
            "setpriv", "--inh-caps=-net_admin", "--bounding-set=-net_admin", "--",
            sys.executable, "-m", "stragglerlab.cli", "testbed", "up", "--nodes", "2", "--link", "10mbit",
            "--prefix", PREFIX,
        ],
        capture_output=True, text=True, env=environment(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "CAP_NET_ADMIN" in proc.stderr
    assert _left(PREFIX) == []


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.skipif(_privileged() is not None, reason=_privileged() or "")
def test_a_two_node_testbed_end_to_end_leaves_nothing_behind(native_ready, tmp_path):
    file = tmp_path / "testbed.toml"
    stragglerlab("testbed", "down", "--prefix", PREFIX)
    try:
        up = stragglerlab("testbed", "up", "--nodes", "2", "--link", "20mbit", "--prefix", PREFIX, "-o", str(file))
        assert up.returncode == 0, up.stderr
        again = stragglerlab("testbed", "up", "--nodes", "2", "--link", "20mbit", "--prefix", PREFIX)
        assert again.returncode == 2 and "testbed down" in again.stderr  # a standing testbed is found, not rebuilt
        probe = stragglerlab("testbed", "probe", str(file), "--json", timeout=120)
        assert probe.returncode == 0, probe.stderr
        found = json.loads(probe.stdout)
        assert found["rate"] == pytest.approx(2.5e6) and found["bandwidth"] <= 1.05 * found["rate"]
        run = tmp_path / "run"
        params = 125_000  # 0.5 MB: a ring of two sends it once each way, 0.2 s on the links
        real = stragglerlab(
            "run", "--example", "eager-injected", "--testbed", str(file), "-o", str(run),
            "--set", "cluster.workers=2", "--set", "iterations=8", "--set", "algorithm.name=sync",
            "--set", f"workload.params={params}", "--set", "workload.compute.mean=0.05",
            "--set", "imbalance.delay=0.02",
            "--set", "network.alpha=1e-4", "--set", "network.beta=4e-7",
            timeout=300,
        )  # fmt: skip
        assert real.returncode == 0, real.stderr
        meta = json.loads((run / "meta.json").read_text())
        assert meta["finished"] and meta["hosts"] == [f"{PREFIX}-n0", f"{PREFIX}-n1"]
        assert meta["testbed"]["prefix"] == PREFIX and meta["testbed"]["rate"] == pytest.approx(2.5e6)
        import pandas as pd

        rounds = pd.read_parquet(run / "rounds.parquet")
        iterations = pd.read_parquet(run / "iterations.parquet")
        # the physics: no round beats the shaped links (the bytes crossed them, not the host's shared memory)
        assert (iterations["wait"].groupby(iterations["round"]).min() >= 0.9 * 4 * params / 2.5e6).all()
        assert len(rounds) == 8
        ddp = tmp_path / "torch"  # the other backend: gloo's allreduce over the same links
        real = stragglerlab(
            "run", "--example", "eager-injected", "--testbed", str(file), "-o", str(ddp), "--backend", "torch",
            "--set", "cluster.workers=2", "--set", "iterations=4", "--set", "algorithm.name=sync",
            "--set", f"workload.params={params}", "--set", "workload.compute.mean=0.05",
            timeout=300,
        )  # fmt: skip
        assert real.returncode == 0, real.stderr
        gloo = pd.read_parquet(ddp / "iterations.parquet")
        assert (gloo["wait"].groupby(gloo["round"]).min() >= 0.9 * 4 * params / 2.5e6).all()
        killed = subprocess.Popen(
            [sys.executable, "-m", "stragglerlab.cli", "run", "--example", "eager-injected", "--testbed", str(file),
             "-o", str(tmp_path / "killed"), "--set", "cluster.workers=2", "--set", "iterations=1000",
             "--set", f"workload.params={params}"],
            env=environment(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while len(testbed.processes(PREFIX)) < 4 and time.monotonic() < deadline:  # a proxy and a rank on each node
            time.sleep(0.2)
        assert len(testbed.processes(PREFIX)) >= 4
        killed.kill()  # SIGKILL: no handler of the command runs; the launcher's death takes the nodes' processes
        killed.wait()
        while testbed.processes(PREFIX) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert testbed.processes(PREFIX) == []
        validated = stragglerlab("validate", str(run), "-o", str(tmp_path / "validation"), timeout=120)
        assert validated.returncode == 0, validated.stderr
        assert (tmp_path / "validation" / "validation.csv").exists()
        assert testbed.processes(PREFIX) == []
    finally:
        down = stragglerlab("testbed", "down", "--prefix", PREFIX)
    assert down.returncode == 0, down.stderr
    assert _left(PREFIX) == []
    assert not Path(f"/run/stragglerlab/{PREFIX}").exists()
