"""Rank 0's service thread takes every rank's requests, rank 0's own in the process, loses none when both come at
once, and answers each its own answer; its posted receive is withdrawn when it ends."""

from __future__ import annotations

import pytest

from tests.processes import run_bounded
from tests.realrun.conftest import ROOT, environment

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]

REQUESTS = 200

#: under mpiexec: every rank asks REQUESTS times and tells once; rank 0's thread answers 2x the request
ASKING = f"""
import sys
import threading
from pathlib import Path
import numpy as np
from mpi4py import MPI
from stragglerlab.realrun.algorithms.service import Service

comm = MPI.COMM_WORLD.Dup()
rank, size = comm.Get_rank(), comm.Get_size()
service = Service(comm, np.zeros(2))
seen = []

def serve():
    told = 0
    while told < size:
        source, request = service.take()
        seen.append((source, *request))
        if len(request) == 1:
            told += 1
        else:
            service.answer(source, 2 * request)
    service.close()

if rank == 0:
    thread = threading.Thread(target=serve)
    thread.start()
answer, wrong = np.zeros(2), 0
for k in range({REQUESTS}):
    service.ask(np.array([rank, k], dtype=float), answer)
    wrong += answer.tolist() != [2 * rank, 2 * k]
service.tell(np.array([-1.0]))
if rank == 0:
    thread.join()
    asked = [s for s in seen if len(s) == 3]
    assert all(source == who for source, who, _ in asked), "a request came from another rank than it says"
    for who in range(size):
        assert [k for _, w, k in asked if w == who] == list(range({REQUESTS})), "requests lost or out of order"
comm.Barrier()
comm.Free()
(Path(sys.argv[1]) / f"wrong-{{rank}}").write_text(str(wrong))
"""


def test_rank_zeros_service_answers_every_rank_and_its_own_rank_in_order(native_ready, tmp_path):
    from stragglerlab.realrun.mpiexec import launch

    script = tmp_path / "asking.py"
    script.write_text(ASKING)
    proc = run_bounded([*launch(2, [])[:-2], str(script), str(tmp_path)], 90, environment(), ROOT)
    assert proc.returncode == 0, proc.stderr
    assert [(tmp_path / f"wrong-{rank}").read_text() for rank in (0, 1)] == ["0", "0"]  # no wrong answer
