"""What every real run's folder must satisfy, whole or cut short by a time budget."""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.runfolder import SCHEMAS, SORT_KEYS


def check_folder(run, P: int, N: int, budgeted: bool = False) -> None:
    """The run folder is finished, has the simulator's schema, sorted rows, and one row per worker-iteration: all
    P·N of them, or with a time budget that ended the run early (``budgeted``) fewer, each worker's from 0 on."""
    assert run.finished and run.meta["source"] == "real" and run.meta["ranks"] == P
    for table in ("iterations", "rounds", "evals"):
        frame = getattr(run, table)
        assert list(frame.columns) == SCHEMAS[table].names
    it = run.iterations
    if budgeted:
        assert 0 < len(it) < P * N
        for _, rows in it.groupby("worker"):
            assert list(rows["iteration"]) == list(range(len(rows)))
    else:
        assert len(it) == P * N
    assert it[SORT_KEYS["iterations"]].equals(it.sort_values(SORT_KEYS["iterations"])[SORT_KEYS["iterations"]])
    assert (it["t_post"] >= it["t_start"]).all() and (it["t_done"] >= it["t_post"]).all()
    assert np.allclose(it["compute"], it["t_post"] - it["t_start"])
    steps = run.rounds["round"].diff().dropna()  # gossip: one row per worker-iteration, so rounds repeat
    assert len(run.rounds) > 0 and run.rounds["round"].iloc[0] == 0 and steps.isin([0, 1]).all()
    carried = it[it["round"] >= 0]
    assert carried["round"].max() < len(run.rounds)
