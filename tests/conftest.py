"""Shared helpers and fixtures: the CLI in-process (the default), or as a subprocess where the
process boundary is what a test is about; one dry run and one full run of all.yaml per session."""
import contextlib
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from demos.cli import main
from demos.scenarios import registry

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
FIXTURES = ROOT / "tests" / "fixtures"
QUICK = ROOT / "tests" / "fixtures" / "quick.yaml"
BASELINE = CONFIGS / "baselines" / "all.cpu.yaml"  # all.yaml's values on the CPU, with bands
# for all.yaml runs whose point is not the support matrices (they cost about 2.7 s a run)
NO_SUPPORT = [a for e in ("legendre_fit", "my_relu", "multiply_add", "my_exp", "linear_function",
                          "custom_function") for a in ("--set", f"scenarios.{e}.support=[]")]


def run_cli(*args, cwd=ROOT, env=None, timeout=600):
    """`python runner.py ARGS` in a subprocess; returns the CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "runner.py"), *map(str, args)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout)


def run_main(output_dir, *args):
    """The CLI in-process, into `output_dir`, without progress bars; returns the exit code."""
    return main(["--no-progress", "--output-dir", str(output_dir), *map(str, args)])


@dataclasses.dataclass
class Run:
    """A finished in-process run: exit code, what the console showed, its folder."""
    code: int
    out: str
    err: str
    dir: Path

    @property
    def summary(self) -> dict:
        return summary(self.dir)




def raised_in(text: str, message: str, file: str, function: str) -> bool:
    """Whether `text` is `message` as one_line says an error raised in the user's code: with
    where, the file (its path ends so), a line and the function."""
    return bool(re.fullmatch(re.escape(message) + rf" \(at \S*{re.escape(file)}:\d+ in "
                             rf"{re.escape(function)}\)", text))


def cli(*args):
    """demos.cli.main in-process: (exit code, stdout, stderr)."""
    from demos.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*map(str, args)])
    return code, out.getvalue(), err.getvalue()


def run_captured(output_dir, *args) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_main(output_dir, *args)
    return Run(code, out.getvalue(), err.getvalue(), only_run_dir(output_dir))


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


def a_summary(**fields) -> dict:
    """A whole summary.json's data, as a run writes one (one passed entry), `fields` changed."""
    from demos.lab.core.results import EntrySummary, RunSummary
    entry = EntrySummary("e", "my_exp", "passed", "cpu", 0, {}, {}, [], [], None, None)
    return {**RunSummary("r", "passed", "2.13.0", "cpu", 0, False, {}, "c.yaml", ["runner.py"],
                         "2026-01-01T00:00:00", 1.0, [entry]).to_json(), **fields}


def patch_run(monkeypatch, name: str, run) -> None:
    """Make scenario `name` run `run(cfg, ctx)` instead of its own, for one test."""
    reg = registry()
    monkeypatch.setitem(reg, name, dataclasses.replace(reg[name], run=run))


def once_per_session(tmp_path_factory, request, name: str, make) -> dict:
    """make(folder) -> a JSON-able dict, once per session, shared by pytest-xdist's workers
    (the first to get here makes it, under a lock, in a folder of the session's; the others
    read what it returned)."""
    from filelock import FileLock

    worker = getattr(request.config, "workerinput", None)
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if worker else base  # under xdist: the session's folder, not a worker's
    done = shared / f"{name}.json"
    with FileLock(shared / f"{name}.lock", timeout=-1):  # as long as the first one's work takes
        if not done.exists():
            done.write_text(json.dumps(make(shared / name)))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def dry_run(tmp_path_factory, request) -> Run:
    """all.yaml --dry-run, once per session: every scenario's code path and files."""
    def make(folder: Path) -> dict:
        run = run_captured(folder, "--config", CONFIGS / "all.yaml", "--dry-run",
                           "--device", "cpu")
        return {"code": run.code, "out": run.out, "err": run.err, "dir": str(run.dir)}

    saved = once_per_session(tmp_path_factory, request, "dry_run", make)
    return Run(saved["code"], saved["out"], saved["err"], Path(saved["dir"]))


@pytest.fixture(scope="session")
def full_run(tmp_path_factory) -> Run:
    """all.yaml at full size, once per session: the documents' numbers (the support matrices,
    which do not depend on sizes, run in the dry run and in tests/test_support.py), compared
    with the committed baseline, whose bands were measured under other kernels and thread
    counts (tests/test_reproducible.py runs it under those); 1 thread, as it was saved."""
    return run_captured(tmp_path_factory.mktemp("full"), "--config", CONFIGS / "all.yaml",
                        "--device", "cpu", "--set", "threads=1", "--baseline", BASELINE,
                        *NO_SUPPORT)


@pytest.fixture
def cpu():
    import torch
    return torch.device("cpu")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Captured output with a path whose bytes are not UTF-8 (tests of such folders) stays
    printable, so that pytest-xdist can send the report from its worker."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(k, v.encode("utf-8", "backslashreplace").decode("utf-8"))
                       for k, v in report.sections]
