"""The network fit: one set of physical parameters fitted to figures of several kinds and rank counts at once recovers
the parameters that made them; what the rules ask of the cost model is what it prices again."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.realrun.calibration import BURSTS, SIZES
from stragglerlab.realrun.networkfit import FITTED_PARAMETERS, Observation, fit, held_out, predict, record, with_params
from stragglerlab.simulator.network import NetworkModel
from tests.helpers import scenario

PLANTED = {
    "alpha": 4e-6,
    "beta": 3e-10,
    "message_overhead": 1.5e-6,
    "gamma": 1.2e-10,
    "fabric_beta": 2e-10,  # 1.5 links' worth: two ranks are not slowed by it, three are
    "overhead": 4e-5,
    "uplink_beta": 0.0,
}


def synthetic(truth: NetworkModel) -> list[Observation]:
    """What a calibration at 2 and 3 ranks would measure if the network were ``truth``."""
    out = []
    for P in (2, 3):
        for name in ("sync", "eager-solo", "wagma", "d-psgd"):
            for n in (4096, 4194304):  # the native core's recursive doubling, and its ring
                keys = {"cluster.workers": P, "algorithm.name": name, "algorithm.group_size": 2}
                rules = record(scenario(**keys, **{"workload.params": n // 4, "network.allreduce": "native"}))
                for (kind, _), ranks in rules.ranks().items():
                    out.append(Observation(kind, ranks, n, 0.0, rules))
    out += [Observation("p2p", 2, n, 0.0) for n in SIZES] + [Observation("burst", 2, k, 0.0) for k in BURSTS]
    return [Observation(o.kind, o.ranks, o.nbytes, predict(truth, o), o.rules) for o in out]


def test_the_fit_recovers_planted_parameters_from_every_kind_and_rank_count_at_once():
    base = NetworkModel.of(scenario(**{"network.allreduce": "native"}))
    observations = synthetic(with_params(base, PLANTED, None))
    kinds = {o.kind for o in observations}
    assert {"sync", "async", "group", "average", "gossip", "p2p", "burst"} <= kinds
    start = {"alpha": 1e-5, "beta": 1e-9, "message_overhead": 1e-6, "gamma": 5e-10, "fabric_beta": 0.0, "overhead": 0}
    found = fit(observations, base, None, start)
    for name in FITTED_PARAMETERS:
        assert found.params[name] == pytest.approx(PLANTED[name], rel=0.02), name
    assert found.residual() < 1e-6 and all(r < 1e-6 for r, _ in found.residuals.values())


def test_recorded_rules_price_each_kind_as_the_simulator_does():
    s = scenario(**{"cluster.workers": 8, "algorithm.name": "wagma", "algorithm.group_size": 4})
    rules = record(s)
    # the butterfly of 8 in groups of 4: groups of 4, then of 2; and the periodic global average over 8
    assert rules.ranks() == {("average", 0): 8, ("group", 0): 4, ("group", 1): 2}
    model = NetworkModel.of(s)
    four = rules.figure(model, "group", 4)
    assert four == pytest.approx(max(model.concurrent("group", 4 * s.workload.params, [[0, 1, 2, 3], [4, 5, 6, 7]])))
    assert rules.figure(model, "gossip", 8) is None
    g = record(scenario(**{"cluster.workers": 4, "algorithm.name": "d-psgd"}))
    assert g.ranks() == {("gossip", 0): 4}
    n = 4 * s.workload.params
    each = NetworkModel.of(s).gossip(n, np.array([1, 3, 0, 2, 1, 3, 0, 2]), np.array([0, 0, 1, 1, 2, 2, 3, 3]))
    assert g.figure(NetworkModel.of(s), "gossip", 4) == pytest.approx(each.max())


def test_each_parameter_has_a_standard_error_and_each_rank_count_is_priced_by_a_fit_without_it():
    base = NetworkModel.of(scenario(**{"network.allreduce": "native"}))
    observations = synthetic(with_params(base, PLANTED, None))
    start = {"alpha": 1e-5, "beta": 1e-9, "gamma": 5e-10, "overhead": 0}
    free = ("alpha", "beta", "gamma", "overhead")
    noisy = [  # a residual of a few percent, as measured figures have, gives the parameters standard errors
        Observation(o.kind, o.ranks, o.nbytes, o.seconds * (1 + 0.03 * np.sin(i)), o.rules)
        for i, o in enumerate(observations)
    ]
    found = fit(noisy, base, None, start, free)
    assert set(found.errors) == set(free)
    assert all(0 < found.errors[p] < found.params[p] for p in ("alpha", "beta"))
    held = held_out(observations, base, None, start, free)
    assert set(held) == {2, 3} and all(n > 0 for _, n in held.values())


def test_a_fit_without_a_fabric_finds_the_uplinks_of_racks():
    planted = {**PLANTED, "fabric_beta": 0.0, "message_overhead": 0.0, "uplink_beta": 6e-10}
    out = []
    for P, per_rack in ((2, 1), (4, 2)):  # a job's racks hold half its nodes, as on a two-rack testbed
        for name in ("sync", "d-psgd"):
            for n in (4096, 4194304):
                keys = {"cluster.workers": P, "cluster.nodes_per_rack": per_rack, "algorithm.name": name}
                rules = record(scenario(**keys, **{"workload.params": n // 4, "network.allreduce": "native"}))
                out += [Observation(kind, ranks, n, 0.0, rules) for (kind, _), ranks in rules.ranks().items()]
    out += [Observation("p2p", 2, n, 0.0) for n in SIZES]
    base = NetworkModel.of(scenario(**{"network.allreduce": "native", "cluster.nodes_per_rack": 2}))
    truth = with_params(base, planted, None)
    observations = [Observation(o.kind, o.ranks, o.nbytes, predict(truth, o), o.rules) for o in out]
    free = ("alpha", "beta", "gamma", "overhead", "uplink_beta")
    start = {"alpha": 1e-5, "beta": 1e-9, "gamma": 5e-10, "overhead": 0, "uplink_beta": 1e-9}
    found = fit(observations, base, None, start, free)
    assert found.params["uplink_beta"] == pytest.approx(6e-10, rel=0.02)
    assert found.params["beta"] == pytest.approx(PLANTED["beta"], rel=0.02)


def test_a_one_host_jobs_ping_pongs_stay_out_of_the_links_fit_where_another_job_spans_hosts():
    """Two ranks a node: the 2-rank job sits on one node, so its ping-pong crossed shared memory; fitted as a link's,
    it put a 6.25 MB/s testbed's per-node bandwidth at 6.9 GB/s."""
    from stragglerlab.realrun.calibration import JobMeasurement
    from stragglerlab.realrun.fragment import observations, start

    sizes = np.array(SIZES, dtype=float)

    def job(ranks: int, hosts: list[str], beta: float) -> JobMeasurement:
        one_way = {"": 1e-5 + sizes * beta, "intra_": 5e-6 + sizes * 1e-9}
        empty = np.zeros(len(SIZES))
        return JobMeasurement(ranks, hosts, "mpi", one_way, np.arange(1.0, len(BURSTS) + 1), empty, None)

    inside, spanning = job(2, ["n0", "n0"], 1e-9), job(4, ["n0", "n0", "n1", "n1"], 1.6e-7)
    pings = [o for o in observations(scenario(), [inside, spanning]) if o.kind in ("p2p", "burst")]
    assert pings and all(o.ranks == 4 or o.kind == "burst" for o in pings)
    assert len([o for o in pings if o.kind == "burst"]) == len(BURSTS)  # the spanning job's only
    assert start([inside, spanning])["beta"] == pytest.approx(1.6e-7)
    # on one host every job's ping-pongs are the links' own
    alone = [o for o in observations(scenario(), [inside]) if o.kind == "p2p"]
    assert len(alone) == len(SIZES)
