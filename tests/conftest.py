"""Shared helpers: run the CLI as a user would (subprocess) or in-process (for monkeypatching)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def run_cli(*args, cwd=ROOT, env=None, timeout=600):
    """`python runner.py ARGS` in a subprocess; returns the CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "runner.py"), *map(str, args)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout)


def only_run_dir(output_dir: Path) -> Path:
    runs = [p for p in Path(output_dir).iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def entry(data: dict, entry_id: str) -> dict:
    return next(e for e in data["scenarios"] if e["id"] == entry_id)


def check(entry_data: dict, name: str) -> dict:
    return next(c for c in entry_data["checks"] if c["name"] == name)


@pytest.fixture
def cpu():
    import torch
    return torch.device("cpu")
