"""A calibration's blocks each in an ``mpiexec`` launch of its own, as ``stragglerlab run --np`` starts a run: what
``calibrate --np`` times DDP's buckets with.

A block that shares its processes with the blocks before it (:class:`~stragglerlab.realrun.roundtimes.InProcess`)
meets DDP's buckets faster than a run of its own does: at 4 ranks on a 2-core machine, calibrations so made were 6–19 %
under the run right after each, in four tries; with launched blocks, 2–8 % over it in three (a run's first rounds are
a little slower than its later ones). Launched, each block starts as a run starts.

**(choice)** A launched figure takes at least 8 blocks, not 3: launches differ more than blocks in one launch do
(eight 24-iteration launches at 3 ranks put the bucket at 2.2–3.7 ms, 15 % apart in standard deviation), and the
standard error of three blocks' means, on two degrees of freedom, is under 0.57 of its true value about one time in
four: two 3-rank calibrations that stopped so after 3 blocks were 14 % under and 18 % over the runs after them. Eight
blocks put the standard error at about 5 % of the mean.

Here the process that launches decides (``deciding``), and ``agree`` is the identity. Run as a module, it is the
ranks' part of one block: ``SCENARIO.json FOLDER BACKEND``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import Run, load_run
from stragglerlab.realrun.harness import run_rank
from stragglerlab.realrun.mpiexec import launch, start
from stragglerlab.simulator.scenario import Scenario, from_dict, to_dict


class Launched:
    """Each block an ``mpiexec -n ranks`` launch of its own on this machine; this process reads the runs."""

    deciding, launched = True, True
    least = 8  # the module doc

    def __init__(self, ranks: int):
        self.ranks = ranks

    def run(self, scenario: Scenario, folder: Path, backend: str) -> Run:
        spec = folder.with_suffix(".json")
        spec.write_text(json.dumps(to_dict(scenario)))
        per_node = scenario.cluster.workers_per_node
        command = launch(self.ranks, [str(spec), str(folder), backend], module=__name__, per_node=per_node)
        proc = start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.communicate()
        if proc.returncode != 0:
            failure = _failure(folder)
            said = failure.read_text() if failure.exists() else f"exit status {proc.returncode}"
            raise UserError(f"a calibration block failed: {said}")
        return load_run(folder)

    def agree(self, value: Any) -> Any:
        return value


def main(argv: list[str]) -> None:
    """The ranks' part of one :class:`Launched` block."""
    from mpi4py import MPI

    spec, folder, backend = argv
    try:
        run_rank(from_dict(json.loads(Path(spec).read_text()), spec), Path(folder), backend, notes=False)
    except Exception as err:  # a failure on one rank would leave the others waiting in their next collective
        if not isinstance(err, UserError):
            traceback.print_exc()
        # each rank writes its own file and renames it into place: every rank fails alike, and one rank's Abort may
        # kill another between its truncating the shared file and writing it, which left the launcher an empty reason
        failure = _failure(Path(folder))
        mine = failure.with_name(f"{failure.name}.{MPI.COMM_WORLD.rank}")
        mine.write_text(str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}")
        os.replace(mine, failure)
        MPI.COMM_WORLD.Abort(1)


def _failure(folder: Path) -> Path:
    """Where a failed block's ranks say why, for the launching process."""
    return folder.with_suffix(".failed")


if __name__ == "__main__":
    main(sys.argv[1:])
