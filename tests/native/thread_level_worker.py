"""Creates a Collective with MPI initialised at MPI_THREAD_SINGLE: must raise UserError (spawned by test_build)."""

import mpi4py

mpi4py.rc.thread_level = "single"

from mpi4py import MPI  # noqa: E402

from stragglerlab.analysis.errors import UserError  # noqa: E402
from stragglerlab.realrun.collectives import Collective  # noqa: E402

try:
    Collective("eager-solo", count=4, comm=MPI.COMM_WORLD)
except UserError as err:
    print(f"UserError: {err}")
