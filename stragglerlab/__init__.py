"""stragglerlab: data-parallel SGD with stragglers, simulated and run for real.

The distribution holds four top-level packages: :mod:`analysis` (run folders, metrics, plots), :mod:`simulator`
(scenarios and event engines), :mod:`native` (the C partial-collective core) and :mod:`realrun` (real runs).
This package only holds the ``stragglerlab`` command, which dispatches to them.
"""

__version__ = "0.1.0"
