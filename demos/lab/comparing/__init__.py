"""Runs compared with what they should give, torch-free: baselines, their tolerances and the
ensembles that measure them."""
