"""Autograd instruments: the graph walk, the traced backward, the graph renders."""
