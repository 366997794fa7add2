"""Generic run machinery, grouped by job; nothing in here knows any particular scenario.

core (torch-free, the bottom) < instruments | checks | pages < comparing < runner: a group
imports only from groups below it (pyproject.toml, [tool.importlinter]; tests/test_layers.py).
"""
