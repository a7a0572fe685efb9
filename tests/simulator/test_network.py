"""The network formulas' own properties: the lower bound holds for every algorithm, one worker costs nothing, point
to point and the activation token (the formulas themselves are checked against closed forms in test_costs.py)."""

import pytest

from stragglerlab.simulator.network import NetworkModel, log2ceil
from tests.helpers import scenario

ALGOS = ("ring", "recursive-doubling", "rabenseifner", "tree")


def test_log2ceil():
    assert [log2ceil(p) for p in (1, 2, 3, 4, 5, 8, 9, 1024, 1025)] == [0, 1, 2, 2, 3, 3, 4, 10, 11]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("p", [1, 2, 7, 64, 1000])
@pytest.mark.parametrize("n", [8, 1e6])
def test_lower_bound_holds(algo, p, n):
    net = NetworkModel.of(scenario(**{"cluster.workers": p, "network.allreduce": algo}))
    assert net.allreduce(p, n) >= net.lower_bound(p, n) - 1e-15


def test_single_worker_costs_nothing():
    net = NetworkModel.of(scenario(**{"cluster.workers": 1}))
    assert net.allreduce(1, 1e6) == 0 and net.activation(1) == 0 and net.lower_bound(1, 1e6) == 0


def test_p2p_and_activation():
    net = NetworkModel.of(
        scenario(
            **{"network.alpha": 1e-6, "network.beta": 1e-9, "network.intra_alpha": 1e-7, "network.intra_beta": 1e-10}
        )
    )
    assert net.p2p(1000) == pytest.approx(1e-6 + 1e-6)
    assert net.p2p(1000, intra=True) == pytest.approx(1e-7 + 1e-7)
    assert net.activation(8) == pytest.approx(3e-6) and net.activation(9) == pytest.approx(4e-6)
