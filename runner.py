#!/usr/bin/env python3
"""Run the autograd demos: python runner.py --config configs/all.yaml [--help for options]."""
from demos.cli import entry_point

if __name__ == "__main__":
    entry_point(prog="runner.py")
