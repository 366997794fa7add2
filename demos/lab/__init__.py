"""Generic run machinery (config, device, recording, checks, plots, graphs, CLI).

Nothing in here knows about any particular scenario.
"""
