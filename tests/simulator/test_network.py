import math

import pytest

from stragglerlab.simulator.network import NetworkModel, flat_allreduce, log2ceil
from tests.helpers import scenario

ALGOS = ("ring", "recursive-doubling", "rabenseifner", "tree")


def test_log2ceil():
    assert [log2ceil(p) for p in (1, 2, 3, 4, 5, 8, 9, 1024, 1025)] == [0, 1, 2, 2, 3, 3, 4, 10, 11]


@pytest.mark.parametrize("p", [2, 3, 8, 13, 64])
def test_allreduce_formulas(p):
    a, b, g, n = 2e-6, 1e-9, 5e-10, 4096.0
    lg = math.ceil(math.log2(p))
    assert flat_allreduce("ring", p, n, a, b, g) == pytest.approx(
        2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g
    )
    assert flat_allreduce("recursive-doubling", p, n, a, b, g) == pytest.approx(lg * (a + n * b + n * g))
    assert flat_allreduce("rabenseifner", p, n, a, b, g) == pytest.approx(
        2 * lg * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g
    )
    assert flat_allreduce("tree", p, n, a, b, g) == pytest.approx(2 * lg * (a + n * b) + lg * n * g)


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


def test_hierarchical_allreduce():
    keys = {
        "cluster.workers": 16,
        "cluster.workers_per_node": 4,
        "network.alpha": 1e-6,
        "network.beta": 1e-9,
        "network.intra_alpha": 1e-7,
        "network.intra_beta": 1e-10,
        "network.gamma": 1e-11,
    }
    net = NetworkModel.of(scenario(**keys))
    n = 1e5
    inside = 2 * (1e-7 + n * 1e-10) + 2 * n * 1e-11
    expected = inside + flat_allreduce("ring", 4, n, 1e-6, 1e-9, 1e-11) + 2 * (1e-7 + n * 1e-10)
    assert net.allreduce(16, n) == pytest.approx(expected)
    # a group inside one node uses only intra-node links
    assert net.allreduce([0, 1, 2, 3], n) == pytest.approx(flat_allreduce("ring", 4, n, 1e-7, 1e-10, 1e-11))
    # intra links default to the inter ones: then one node per worker is the flat formula
    flat = NetworkModel.of(scenario(**{"cluster.workers": 16}))
    assert flat.allreduce(16, n) == pytest.approx(flat_allreduce("ring", 16, n, flat.alpha, flat.beta, 0.0))
