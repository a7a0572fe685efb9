"""Metrics of one run, from its tables alone (simulated and real runs alike)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from analysis.runfolder import Run


@dataclass(frozen=True)
class Summary:
    """The headline numbers of a run. Staleness is over contributions that some round carried."""

    algorithm: str
    workers: int
    iterations: int  # worker-iterations run
    makespan: float  # seconds until the last worker finished
    samples_per_s: float
    mean_iteration: float
    mean_wait: float
    mean_staleness: float
    max_staleness: int
    fresh_fraction: float

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(run: Run) -> Summary:
    """Summary of a run; samples are worker-iterations times ``workload.batch``."""
    scenario = run.meta["scenario"]
    it: pd.DataFrame = run.iterations
    carried = it["staleness"][it["round"] >= 0]
    makespan = float(it["t_done"].max()) if len(it) else 0.0
    samples = len(it) * scenario["workload"]["batch"]
    return Summary(
        algorithm=scenario["algorithm"]["name"],
        workers=scenario["cluster"]["workers"],
        iterations=len(it),
        makespan=makespan,
        samples_per_s=samples / makespan if makespan > 0 else float("nan"),
        mean_iteration=float((it["t_done"] - it["t_start"]).mean()) if len(it) else float("nan"),
        mean_wait=float(it["wait"].mean()) if len(it) else float("nan"),
        mean_staleness=float(carried.mean()) if len(carried) else float("nan"),
        max_staleness=int(carried.max()) if len(carried) else 0,
        fresh_fraction=float(np.mean(it["fresh"])) if len(it) else float("nan"),
    )
