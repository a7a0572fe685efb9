"""Each exchange as the messages it sends: every schedule's message count, sizes and steps against closed forms, and
its critical path on links that no two messages share; then links that are shared: two flows on one link take twice
one, max-min fairness, P pushes into one server take P times one, WAGMA's groups and gossip's neighbours."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stragglerlab.simulator import schedules
from stragglerlab.simulator.costs import cost_model
from stragglerlab.simulator.links import Links, max_min
from tests.helpers import run_tables, scenario

A, B, G = 3e-6, 2e-9, 5e-10
N = 1e6


def counted(schedule):
    """(steps counting repeats, messages, [(bytes, reduce) of each step, repeated])."""
    steps = [(float(s.nbytes[0]), bool(s.reduce[0]), len(s.src)) for s in schedule for _ in range(s.repeat)]
    return len(steps), sum(m for *_, m in steps), [(b, r) for b, r, _ in steps]


@pytest.mark.parametrize("p", [2, 3, 5, 8, 13])
def test_ring_is_two_times_p_minus_one_steps_of_n_over_p(p):
    steps, messages, sizes = counted(schedules.ring(list(range(p)), N))
    assert steps == 2 * (p - 1) and messages == 2 * (p - 1) * p
    assert sizes == [(N / p, True)] * (p - 1) + [(N / p, False)] * (p - 1)


@pytest.mark.parametrize("p", [2, 3, 4, 6, 7, 8, 12])
def test_recursive_doubling_folds_the_ranks_beyond_a_power_of_two(p):
    low = 1 << (p.bit_length() - 1)
    extra = p - low
    steps, messages, sizes = counted(schedules.recursive_doubling(list(range(p)), N))
    rounds = int(math.log2(low))
    assert steps == rounds + (2 if extra else 0)
    assert messages == rounds * low + 2 * extra  # the fold in and out: one message per folded pair each way
    assert all(b == N for b, _ in sizes) and [r for _, r in sizes] == [True] * (steps - bool(extra)) + [False] * bool(
        extra
    )
    first = schedules.recursive_doubling(list(range(p)), N)[0]
    if extra:  # the even ones of the first 2·extra hand their vector to the next odd one
        assert list(first.src) == list(range(0, 2 * extra, 2)) and list(first.dst) == list(range(1, 2 * extra, 2))


@pytest.mark.parametrize("p", [2, 4, 8, 6])
def test_rabenseifner_halves_then_doubles_the_vector(p):
    low = 1 << (p.bit_length() - 1)
    rounds = int(math.log2(low))
    _, _, sizes = counted(schedules.rabenseifner(list(range(p)), N))
    inner = [(N / 2**k, True) for k in range(1, rounds + 1)] + [(N / 2**k, False) for k in range(rounds, 0, -1)]
    assert sizes == ([(N, True), *inner, (N, False)] if p != low else inner)


@pytest.mark.parametrize("p", [2, 3, 5, 8, 9])
def test_tree_reduces_up_and_broadcasts_down_in_log_levels(p):
    steps, messages, sizes = counted(schedules.tree(list(range(p)), N))
    levels = math.ceil(math.log2(p))
    assert steps == 2 * levels and messages == 2 * (p - 1)  # every rank but the root sends once up, gets once down
    assert sizes == [(N, True)] * levels + [(N, False)] * levels


@pytest.mark.parametrize("p", [2, 3, 8, 100, 1024])
def test_the_activation_token_is_a_binomial_tree(p):
    steps, messages, sizes = counted(schedules.activation(list(range(p))))
    assert steps == math.ceil(math.log2(p)) and messages == p - 1 and all(b == 0 for b, _ in sizes)
    reached = {0}
    for s in schedules.activation(list(range(p))):  # each step, those reached tell as many more
        assert set(s.src) <= reached
        reached |= set(s.dst)
    assert reached == set(range(p))


def test_the_native_core_switches_to_the_ring_at_128_kib():
    small = schedules.native(list(range(4)), 64 * 1024, 4)
    large = schedules.native(list(range(4)), 256 * 1024, 4)
    assert all(s.nbytes[0] == 64 * 1024 + 16 * 4 for s in small) and len(small) == 2
    assert [s.nbytes[0] for s in large] == [64, 64, 64 * 1024, 64 * 1024]  # the metadata, then the ring's segments


@pytest.mark.parametrize("algorithm", ["ring", "recursive-doubling", "rabenseifner", "tree"])
@pytest.mark.parametrize("p", [2, 3, 6, 8])
def test_alone_on_their_links_the_steps_add_up_to_the_closed_forms(algorithm, p):
    lg, low = p.bit_length() - 1, 1 << (p.bit_length() - 1)
    closed = {  # one rank per node, no fabric limit, no message overhead
        "ring": 2 * (p - 1) * A + 2 * (p - 1) / p * N * B + (p - 1) / p * N * G,
        "recursive-doubling": lg * (A + N * B + N * G) if p == low else (lg + 2) * (A + N * B) + (lg + 1) * N * G,
        "rabenseifner": 2 * lg * A + 2 * (p - 1) / p * N * B + (p - 1) / p * N * G
        if p == low
        else (2 * lg + 2) * A + (2 * (low - 1) / low + 2) * N * B + ((low - 1) / low + 1) * N * G,
        "tree": 2 * math.ceil(math.log2(p)) * (A + N * B) + math.ceil(math.log2(p)) * N * G,
    }[algorithm]
    model = cost_model(scenario(**{"network.alpha": A, "network.beta": B, "network.gamma": G}))
    assert model.allreduce(p, N, algorithm) == pytest.approx(closed, rel=1e-12)


def test_two_flows_on_one_link_take_twice_one():
    links = Links(A, B, A, B)
    one = links.arrivals([0], [1], [N])
    assert one[0] == pytest.approx(A + N * B)
    two = links.arrivals([0, 0], [1, 2], [N, N])  # both leave rank 0's link
    assert two == pytest.approx([A + 2 * N * B] * 2)
    into = links.arrivals([1, 2], [0, 0], [N, N])  # both enter rank 0's link
    assert into == pytest.approx([A + 2 * N * B] * 2)
    apart = links.arrivals([0, 2], [1, 3], [N, N])  # no link shared
    assert apart == pytest.approx([A + N * B] * 2)


def test_a_flow_that_ends_early_leaves_its_share_to_the_other():
    links = Links(0.0, B, 0.0, B)
    done = links.arrivals([0, 0], [1, 2], [N, 3 * N])
    # both at half speed until the first ends at 2·N·B; the second then has N·B of its bytes left at full speed
    assert done == pytest.approx([2 * N * B, 4 * N * B])


def test_max_min_gives_a_flow_bottlenecked_elsewhere_no_more_than_it_can_use():
    # flows 0 and 1 share link 0 (capacity 10); flow 1 also crosses link 1 (capacity 2): flow 1 gets 2, flow 0 gets 8
    rates = max_min(np.array([[0, -1], [0, 1]]), np.array([10.0, 2.0]))
    assert rates == pytest.approx([8.0, 2.0])


def test_the_fabric_is_shared_by_every_message_between_nodes():
    alone = Links(A, B, A, B)
    shared = Links(A, B, A, B, fabric_beta=B / 2)  # carries two links' worth at once
    pairs = ([0, 1, 2, 3], [1, 0, 3, 2])
    assert alone.arrivals(*pairs, [N] * 4) == pytest.approx([A + N * B] * 4)
    assert shared.arrivals(*pairs, [N] * 4) == pytest.approx([A + 2 * N * B] * 4)


def test_a_ranks_messages_of_one_step_leave_one_overhead_apart():
    links = Links(A, 0.0, A, 0.0, o=1e-6)
    assert links.arrivals([0, 0, 0], [1, 2, 3], [0, 0, 0]) == pytest.approx([A + 1e-6, A + 2e-6, A + 3e-6])


def test_p_pushes_into_one_server_take_p_times_one():
    P, params = 8, 250_000  # 1 MB pushes, nothing else to serve them: only the server's link
    s = scenario(
        **{
            "algorithm.name": "async-ps",
            "cluster.workers": P,
            "iterations": 1,
            "workload.params": params,
            "workload.compute": {"dist": "constant", "mean": 0.01},
            "network.alpha": A,
            "network.beta": B,
        }
    )
    it, _ = run_tables(s)
    one = 4 * params * B
    served = np.sort(it["t_done"].to_numpy()) - 0.01 - 2 * A - one  # less the latency both ways and the reply
    assert served == pytest.approx(one * np.arange(1, P + 1), rel=1e-9)


def test_wagma_groups_on_shared_nodes_slow_each_other():
    # 8 ranks, 4 to a node, groups of 2: phase 0 pairs (0,1), (2,3), ... inside nodes; phase 2 pairs (0,4), ...
    # across: four pairs leave each node at once on its one link
    keys = {
        "cluster.workers": 8,
        "cluster.workers_per_node": 4,
        "network.alpha": A,
        "network.beta": B,
        "network.intra_alpha": A,
        "network.intra_beta": B,
    }
    model = cost_model(scenario(**keys))
    across = [[0, 4], [1, 5], [2, 6], [3, 7]]
    inside = [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert model.concurrent("group", N, inside) == pytest.approx([model.allreduce(2, N)] * 4)
    # a ring of two: two steps of n/2 bytes each way, four pairs on each node's link
    assert model.concurrent("group", N, across) == pytest.approx([2 * (A + 4 * N / 2 * B)] * 4)
    # one group alone across two nodes is not slowed
    assert model.concurrent("group", N, [[0, 4]]) == pytest.approx([2 * (A + N / 2 * B)])


def test_a_d_psgd_worker_shares_its_link_among_its_neighbours():
    model = cost_model(scenario(**{"network.alpha": A, "network.beta": B}))
    P = 8
    src = np.concatenate([np.arange(P), np.arange(P)])
    dst = np.concatenate([(np.arange(P) + 1) % P, (np.arange(P) - 1) % P])  # each sends to both ring neighbours
    assert model.gossip(N, src, dst) == pytest.approx([A + 2 * N * B] * (2 * P))


def test_racks_share_their_uplinks_and_nothing_else():
    # 8 nodes, 4 to a rack, the uplinks as fast as a node's link: one message leaving a rack is not slowed, two share
    # their rack's uplink, and messages inside a rack never cross it
    links = Links(A, B, A, B, per_rack=4, uplink_beta=B)
    assert links.arrivals([0], [4], [N]) == pytest.approx([A + N * B])
    assert links.arrivals([0, 1], [4, 5], [N, N]) == pytest.approx([A + 2 * N * B] * 2)
    assert links.arrivals([0, 2], [1, 3], [N, N]) == pytest.approx([A + N * B] * 2)
    # the taper: an uplink a quarter as fast as the rack's four node links carries four of them at a quarter's rate
    tapered = Links(A, B, A, B, per_rack=4, uplink_beta=B)
    assert tapered.arrivals([0, 1, 2, 3], [4, 5, 6, 7], [N] * 4) == pytest.approx([A + 4 * N * B] * 4)
    assert Links(A, B, A, B, per_rack=4).arrivals([0, 1, 2, 3], [4, 5, 6, 7], [N] * 4) == pytest.approx([A + N * B] * 4)


def test_a_ring_over_racks_crosses_each_uplink_once_each_way():
    s = scenario(
        **{
            "cluster.workers": 8,
            "cluster.nodes_per_rack": 4,
            "network.alpha": A,
            "network.beta": B,
            "network.uplink_beta": B,
        }
    )
    # one message a step leaves each rack (3 -> 4 and 7 -> 0): the uplinks are as fast as the nodes' links
    assert cost_model(s).allreduce(8, N, "ring") == pytest.approx(14 * A + 14 / 8 * N * B)
    # recursive doubling's last step pairs i with i ^ 4: all four of a rack's nodes leave it at once
    rd = cost_model(s).allreduce(8, N, "recursive-doubling")
    assert rd == pytest.approx(3 * A + 2 * N * B + 4 * N * B)


def test_groups_listed_in_any_order_are_priced_alike():
    model = cost_model(scenario(**{"cluster.workers": 8, "network.alpha": A, "network.beta": B}))
    up = model.concurrent("group", N, [[1, 5], [2, 6]])
    down = model.concurrent("group", N, [[5, 1], [6, 2]])
    assert down == pytest.approx(up) and up == pytest.approx([model.allreduce([1, 5], N)] * 2)
    racked = cost_model(
        scenario(
            **{
                "cluster.workers": 8,
                "cluster.nodes_per_rack": 4,
                "network.alpha": 0.0,
                "network.beta": B,
                "network.uplink_beta": 2 * B,
            }
        )
    )
    # a pair inside rack 1 and a pair across both racks (over uplinks half as fast): alike on the nodes, not on racks
    inside, across = racked.concurrent("group", N, [[5, 6], [3, 4]])
    assert inside == pytest.approx(N * B) and across == pytest.approx(2 * N * B)


def test_cached_schedules_cannot_be_changed():
    schedule = schedules.allreduce("ring", (0, 1, 2, 3), N, 1, 4)
    with pytest.raises(ValueError):
        schedule[0].nbytes[0] = 0.0
