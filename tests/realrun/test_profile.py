"""``stragglerlab profile``: a torch workload's passes timed, its gradient bucketed as DDP would, written as a fragment
that ``simulate`` accepts; refused for workloads that are not torch's."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from stragglerlab.realrun.profile import Profile, fragment
from stragglerlab.simulator.scenario import load
from tests.realrun.conftest import stragglerlab

pytest.importorskip("torch")


def test_buckets_and_backward_share_of_a_profile():
    measured = Profile(forward=np.array([1.0, 1.0, 1.2]), backward=np.array([2.0, 2.2, 2.0]), parameters=20_000_000)
    keys = measured.keys(25.0)
    assert keys["buckets"] == math.ceil(80_000_000 / (25 * 2**20)) == 4  # 80 MB of float32 in 25 MiB buckets
    assert keys["backward"] == pytest.approx(2.0 / 3.2, abs=1e-4)  # median backward over median total
    assert keys["params"] == 20_000_000 and keys["compute"]["mean"] == pytest.approx(np.mean([3.0, 3.2, 3.2]))
    text = fragment(load(text='[workload]\nmodel = "torch:mlp"\n', name="s"), measured, 25.0)
    assert tomllib.loads(text)["workload"]["buckets"] == 4


def test_profile_writes_a_fragment_that_simulate_accepts(tmp_path):
    out = tmp_path / "profile.toml"
    workload = tmp_path / "torch.toml"
    workload.write_text('[workload]\nmodel = "torch:mlp"\n')
    done = stragglerlab(
        "profile",
        str(workload),
        "--set",
        "workload.batch=8",
        "--iterations",
        "3",
        "-o",
        str(out),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"fragment: {out}"
    keys = tomllib.loads(out.read_text())["workload"]
    assert keys["params"] > 1000 and 0 < keys["backward"] <= 1 and keys["buckets"] == 1
    assert keys["compute"]["mean"] > 0
    scenario = tmp_path / "s.toml"
    scenario.write_text(out.read_text())
    again = stragglerlab("simulate", str(scenario), "--set", "iterations=3", "-o", str(tmp_path / "run"))
    assert again.returncode == 0, again.stderr
    refused = stragglerlab("profile", str(workload), "--set", "workload.model=mlp", "--iterations", "3")
    assert refused.returncode == 2 and "profile times torch workloads" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
