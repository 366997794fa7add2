"""`python -m demos --config configs/all.yaml`: the same command line as runner.py."""
import sys

from demos.cli import main

sys.exit(main(prog="python -m demos"))
