"""Subcommands of ``stragglerlab`` implemented by the real-run plane."""
