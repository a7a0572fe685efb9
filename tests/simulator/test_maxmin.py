"""Properties of the max-min fair share on random flows and links: no link carries more than its capacity, and every
flow is held by a link it saturates where no flow gets more than it (the bottleneck condition that defines max-min
fairness)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stragglerlab.simulator.links import max_min


@st.composite
def networks(draw):
    links = draw(st.integers(1, 6))
    capacity = np.array(draw(st.lists(st.floats(0.5, 100.0), min_size=links, max_size=links)))
    flows = draw(st.integers(1, 12))
    rows = [sorted(draw(st.sets(st.integers(0, links - 1), min_size=1, max_size=min(3, links)))) for _ in range(flows)]
    width = max(len(r) for r in rows)
    table = np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int64)
    return table, capacity


@settings(max_examples=300, deadline=None)
@given(networks())
def test_every_link_within_capacity_and_every_flow_held_by_a_saturated_link(network):
    table, capacity = network
    rate = max_min(table, capacity)
    assert np.all(np.isfinite(rate)) and np.all(rate > 0)
    load = np.zeros(len(capacity))
    for row, r in zip(table, rate, strict=True):
        load[row[row >= 0]] += r
    assert np.all(load <= capacity * (1 + 1e-9))
    for row, r in zip(table, rate, strict=True):
        held = False
        for link in row[row >= 0]:
            on_it = [rate[f] for f in range(len(table)) if link in table[f]]
            if load[link] >= capacity[link] * (1 - 1e-9) and r >= max(on_it) * (1 - 1e-9):
                held = True
        assert held, (row, r)
