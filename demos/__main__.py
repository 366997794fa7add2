"""`python -m demos --config configs/all.yaml`: the same command line as runner.py."""
from demos.cli import entry_point

if __name__ == "__main__":
    entry_point(prog="python -m demos")
