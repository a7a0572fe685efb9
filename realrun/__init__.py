"""Real runs: the Python binding of the native core, its build, and the harness that trains under MPI."""
