"""Checks of a Function and its results: gradients, backward structure, the support matrix."""
