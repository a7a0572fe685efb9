"""Run folders, metrics, plots and validation, shared by simulated and real runs."""
