"""The fast engine: numba-compiled sweeps that produce the reference engine's tables."""
