#!/usr/bin/env python3
"""Run the autograd demos: python runner.py --config configs/all.yaml [--help for options]."""
import sys

from demos.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="runner.py"))
