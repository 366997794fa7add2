"""Runs compared, torch-free: tolerances applied to baselines, side by side, sweeps, aggregates,
ensembles."""
