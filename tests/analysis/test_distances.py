"""The distances and the throughput that validation adds, on samples with known answers."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from stragglerlab.analysis.compare import ks_apart, ks_distance, tv_distance
from stragglerlab.analysis.metrics import active_samples_per_s
from stragglerlab.analysis.runfolder import Run


def test_ks_distance():
    assert ks_distance([1, 2, 3], [3, 2, 1]) == 0
    assert ks_distance([1, 2], [3, 4]) == 1
    assert ks_distance([1, 2, 3, 4], [3, 4, 5, 6]) == pytest.approx(0.5)
    assert math.isnan(ks_distance([], [1.0]))


def test_ks_apart_is_the_mean_distance_over_every_pair():
    assert ks_apart([[1, 2], [2, 1], [1, 2]]) == 0
    # pairs: (a, b) 1, (a, c) 0.5, (b, c) 0.5
    assert ks_apart([[1, 2, 3, 4], [5, 6, 7, 8], [3, 4, 5, 6]]) == pytest.approx(2 / 3)
    assert math.isnan(ks_apart([[1, 2]]))


def test_tv_distance():
    assert tv_distance([0, 0, 1, 1], [1, 0]) == 0
    assert tv_distance([0, 0, 0, 1], [0, 1, 1, 1]) == pytest.approx(0.5)
    assert tv_distance([0], [2]) == 1
    assert math.isnan(tv_distance([0], []))


def test_active_samples_per_s_leaves_out_the_start_up():
    it = pd.DataFrame({"t_start": [1.0, 1.5, 2.0, 2.5], "t_done": [1.5, 2.0, 2.5, 3.0], "samples": [10] * 4})
    run = Run(Path("r"), {"scenario": {"workload": {"batch": 10}}}, it, pd.DataFrame(), pd.DataFrame())
    assert active_samples_per_s(run) == pytest.approx(4 * 10 / 2.0)  # 4 iterations in 1.0 .. 3.0 s
    empty = Run(Path("r"), run.meta, it.iloc[:0], pd.DataFrame(), pd.DataFrame())
    assert math.isnan(active_samples_per_s(empty))
