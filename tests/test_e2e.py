"""runner.py end to end, as a user runs it: files, summary.json, console and exit codes."""
import csv
import datetime as dt
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from demos.cli import main
from demos.lab.comparing.baseline import read_baseline as load_baseline
from demos.lab.core.config import load
from demos.lab.core.files import make_run_dir
from demos.lab.core.schema import ConfigError
from demos.scenarios import registry
from demos.scenarios.legendre_fit import LegendrePolynomial3
from tests.conftest import (
    BASELINE,
    CONFIGS,
    NO_SUPPORT,
    QUICK,
    ROOT,
    check,
    entry,
    only_run_dir,
    patch_run,
    raised_in,
    run_captured,
    run_cli,
    summary,
)
from tests.fixtures.wrong_functions import P3MissingFactor

SIGNATURES = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-", ".csv": b"step,",
              ".gif": b"GIF89a"}
ENTRY_KEYS = {"id", "scenario", "status", "device", "steps", "metrics", "params", "checks",
              "artifacts", "timing", "error"}


def assert_scenario_folder(run_dir, e, dot=True):
    """The entry wrote exactly the files its scenario declares, each a real file of its kind."""
    scenario = registry()[e["scenario"]]
    expected = [f for f in scenario.files if dot or not f.endswith((".pdf", ".svg"))]
    folder = run_dir / e["id"]
    for name in expected:
        path = folder / name
        assert path.is_file() and path.stat().st_size > 0, path
        if path.suffix in SIGNATURES:
            assert path.read_bytes().startswith(SIGNATURES[path.suffix]), path
        if path.suffix == ".svg":
            assert "<svg" in path.read_text()
    optional = [f for f in scenario.optional_files if f in e["artifacts"]]
    assert sorted(e["artifacts"]) == sorted(expected + optional)
    if e["scenario"] == "custom_function" and dot:  # all.yaml's has double_backward: true
        assert "second_backward.svg" in optional, e["artifacts"]
    assert "Leaves reached" in (folder / "explain.txt").read_text()
    if scenario.trains:
        rows = list(csv.DictReader((folder / "metrics.csv").open()))
        assert len(rows) >= 2 and float(rows[-1]["step"]) == e["steps"] - 1
        assert e["timing"]["train_s"] > 0 and e["timing"]["steps_per_s"] > 0
    else:
        assert e["steps"] == 0 and e["timing"] is None


def test_every_scenario_dry_run(dry_run):
    assert dry_run.code == 0, dry_run.out + dry_run.err
    for name in ("config.yaml", "run.log", "summary.json", "report.html"):
        assert (dry_run.dir / name).is_file()
    data = dry_run.summary
    assert data["status"] == "passed" and data["run_id"] == dry_run.dir.name
    assert data["torch"].startswith("2.") and data["device"] == "cpu" and data["seed"] == 0
    assert sorted(e["scenario"] for e in data["scenarios"]) == sorted(
        n for n, s in registry().items() if not s.data_parallel)  # lenet_ddp: tests/test_ddp.py
    for e in data["scenarios"]:
        assert ENTRY_KEYS <= set(e) and e["status"] == "passed" and e["error"] is None
        assert all(c["passed"] is not False for c in e["checks"])
        assert_scenario_folder(dry_run.dir, e)
        assert re.search(rf"^PASSED +{e['id']} ", dry_run.out, re.M)
    assert str(dry_run.dir) in dry_run.out.splitlines()[-2]


def test_every_shipped_config_is_covered_by_all_yaml_and_loads():
    """Each configs/<name>.yaml is an entry of all.yaml (test_config checks they match);
    lenet_ddp.yaml is for torchrun (tests/test_ddp.py runs it)."""
    names = {p.stem for p in CONFIGS.glob("*.yaml")} - {"all"}
    assert names == set(registry())
    ddp = load(str(CONFIGS / "lenet_ddp.yaml"), registry())
    assert [e.scenario for e in ddp.scenarios] == ["lenet_ddp"]


def test_the_command_line_as_a_user_runs_it(tmp_path):
    proc = subprocess.run([sys.executable, "runner.py", "--config", str(QUICK),
                           "--output-dir", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^PASSED +my_exp +checks 7/7", proc.stdout, re.M)
    assert proc.stdout.splitlines()[-2].startswith("PASSED: 1 of 1 scenarios passed; results in ")
    assert summary(only_run_dir(tmp_path))["status"] == "passed"


def test_python_m_demos_is_the_same_command_line():
    proc = subprocess.run([sys.executable, "-m", "demos", "--list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and [ln.split()[0] for ln in proc.stdout.splitlines()] == \
        list(registry())
    proc = subprocess.run([sys.executable, "-m", "demos", "--bogus"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unrecognized arguments")


def test_the_console_script_is_installed():
    script = Path(sys.executable).parent / "autograd-demos"
    if not script.exists():
        pytest.skip("the package is not installed with its scripts here (make setup does)")
    proc = subprocess.run([str(script), "--list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split()[0] in registry()


def test_all_yaml_reproduces_the_documents(full_run):
    assert full_run.code == 0, full_run.out + full_run.err
    data = full_run.summary
    run_dir = full_run.dir
    assert data["status"] == "passed"
    assert [e["status"] for e in data["scenarios"]] == ["passed"] * len(
        [s for s in registry().values() if not s.data_parallel])
    legendre = entry(data, "legendre_fit")
    assert legendre["steps"] == 2000
    assert legendre["metrics"]["final_loss"] == pytest.approx(8.94364, rel=1e-4)
    assert legendre["params"]["b"] == pytest.approx(-2.2085268, rel=1e-5)
    assert legendre["params"]["d"] == pytest.approx(0.2554861, rel=1e-5)
    assert abs(legendre["params"]["a"]) < 1e-6 and abs(legendre["params"]["c"]) < 1e-6
    relu = entry(data, "my_relu")
    assert relu["metrics"]["initial_loss"] > 1e6 and relu["metrics"]["final_loss"] < 1e-2
    lenet = entry(data, "lenet")
    assert lenet["metrics"]["test_accuracy"] >= 0.95
    assert lenet["metrics"]["parameters"] == 81194
    ma = entry(data, "multiply_add")
    assert ma["inspection"]["out.grad_fn"] == "MultiplyAddBackward"
    assert ma["inspection"]["out.grad_fn.next_functions"] == ["AccumulateGrad", "None",
                                                              "AccumulateGrad"]
    assert entry(data, "computation_graph")["metrics"] == {"h": 4.5}
    assert entry(data, "autograd_internals")["metrics"] == {
        "e": 20.0, "a_grad": 4.0, "b_grad": 4.0, "c_grad_retained": 4.0, "d_grad": 5.0}
    assert entry(data, "my_exp")["metrics"]["max_grad_error"] <= 1e-6
    linear = entry(data, "linear_function")
    assert linear["metrics"]["weight_error"] < 0.01 and linear["metrics"]["bias_error"] < 0.01
    for e in data["scenarios"]:
        assert_scenario_folder(run_dir, e)
        assert all(c["passed"] is True for c in e["checks"])
    log = (run_dir / "run.log").read_text()
    assert "MultiplyAddBackward" in log and "Net(" in log and "conv1" in log
    source = (run_dir / "multiply_add" / "graph.gv").read_text()
    assert "MultiplyAddBackward" in source and "w\n" in source and "x\n" in source


def test_a_wrong_expectation_fails_with_exit_1(tmp_path):
    run = run_captured(tmp_path, "--config", CONFIGS / "legendre_fit.yaml",
                       "--set", "scenarios.legendre_fit.expect.params.b.value=-2.0",
                       "--set", "scenarios.legendre_fit.support=[]")
    assert run.code == 1, run.out + run.err
    data = run.summary
    e = entry(data, "legendre_fit")
    assert data["status"] == "failed" and e["status"] == "failed"
    assert check(e, "expect params.b")["passed"] is False
    assert check(e, "expect params.d")["passed"] is True
    assert "FAIL expect params.b: -2.2085268; expected -2" in run.out


def test_a_wrong_backward_fails_gradcheck_and_parity_with_exit_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(LegendrePolynomial3, "backward", staticmethod(P3MissingFactor.backward))
    code = main(["--config", str(CONFIGS / "all.yaml"), *NO_SUPPORT, "--only", "legendre_fit",
                 "--dry-run",
                 "--no-progress", "--output-dir", str(tmp_path)])
    assert code == 1
    e = entry(summary(only_run_dir(tmp_path)), "legendre_fit")
    assert e["status"] == "failed"
    assert check(e, "gradcheck")["passed"] is False
    assert "Jacobian mismatch" in check(e, "gradcheck")["detail"]
    assert check(e, "parity")["passed"] is False
    assert check(e, "parity")["detail"].startswith("grad ")
    assert "FAIL gradcheck" in capsys.readouterr().out


def test_a_scenario_that_raises_does_not_stop_the_others(tmp_path, monkeypatch):
    def boom(cfg, ctx):
        for t in ctx.steps(3):
            ctx.record(t, loss=float(t))
        raise RuntimeError("boom at the end")
    patch_run(monkeypatch, "my_relu", boom)
    code = main(["--config", str(CONFIGS / "all.yaml"), "--dry-run", "--no-progress",
                 "--output-dir", str(tmp_path), *NO_SUPPORT])
    assert code == 1
    run_dir = only_run_dir(tmp_path)
    data = summary(run_dir)
    assert data["status"] == "failed"
    assert [e["status"] for e in data["scenarios"]] == [
        "error" if e["id"] == "my_relu" else "passed" for e in data["scenarios"]]
    relu = entry(data, "my_relu")
    assert raised_in(relu["error"], "RuntimeError: boom at the end", "test_e2e.py", "boom")
    assert relu["steps"] == 3
    assert (run_dir / "my_relu" / "metrics.csv").is_file()  # what it produced is kept
    assert "Traceback" in (run_dir / "run.log").read_text()


def test_without_dot_the_graph_source_is_kept_and_the_scenario_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    run = run_captured(tmp_path / "runs", "--config", CONFIGS / "all.yaml", *NO_SUPPORT,
                       "--dry-run",
                       "--only", "multiply_add,computation_graph")  # four graphs, one warning
    assert run.code == 0, run.out + run.err
    warnings = [ln for ln in run.err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "'dot' not found" in warnings[0]
    assert "apt-get install graphviz" in warnings[0]
    e = entry(run.summary, "multiply_add")
    assert e["status"] == "passed"
    assert_scenario_folder(run.dir, e, dot=False)
    assert not (run.dir / "multiply_add" / "graph.pdf").exists()


def test_run_ids_are_unique_and_never_reused(tmp_path):
    now = dt.datetime(2026, 1, 2, 3, 4, 5)
    first, second = make_run_dir(tmp_path, now), make_run_dir(tmp_path, now)
    assert first.name == "2026-01-02_03-04-05" and second.name == "2026-01-02_03-04-05-1"
    assert make_run_dir(tmp_path, now).name == "2026-01-02_03-04-05-2"


def test_an_output_dir_that_cannot_be_created_is_a_usage_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot create the run folder"):
        make_run_dir(blocker / "runs", dt.datetime.now())
    code = main(["--config", str(CONFIGS / "multiply_add.yaml"), "--dry-run",
                 "--output-dir", str(blocker / "runs")])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"error: --output-dir {blocker / 'runs'}: ")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_every_scenario_runs_on_cuda(tmp_path):
    proc = run_cli("--config", CONFIGS / "all.yaml", "--dry-run", "--device", "cuda",
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = summary(only_run_dir(tmp_path))
    assert data["device"].startswith("cuda")
    assert all(e["status"] == "passed" and e["device"].startswith("cuda")
               for e in data["scenarios"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
@pytest.mark.parametrize("name", [n for n, s in registry().items() if s.trains])
def test_training_steps_never_sync_the_gpu(tmp_path, name):
    """Every training step runs under torch.cuda.set_sync_debug_mode('error')."""
    import logging

    from demos.lab.pages.artifacts import Artifacts
    from demos.lab.runner.context import Context, Shared
    from demos.lab.runner.recorder import Recorder

    scenario = registry()[name]
    cfg = scenario.shrink(scenario.config(scenario=name, id=name))
    artifacts = Artifacts(print)
    device = torch.device("cuda")
    ctx = Context(cfg, tmp_path, logging.getLogger("t"),
                  Shared(device, progress=True, artifacts=artifacts),
                  Recorder(device, cfg.log_every, finite_every=10**9, forbid_sync=True))
    torch.manual_seed(0)
    scenario.run(cfg, ctx)
    artifacts.wait()
    assert ctx.steps_run > 0 and ctx.steps_run == getattr(cfg, "steps", ctx.steps_run)


def test_all_yaml_matches_the_committed_baseline(full_run):
    block = full_run.summary["baseline"]
    assert block["status"] == "passed", block
    assert block["compared"] == sum(len(e["metrics"]) + len(e["params"])
                                    for e in full_run.summary["scenarios"]) > 30
    base = load_baseline(str(BASELINE))
    assert base.threads == 1 and block["measured"] and len(base.ensemble) >= 10
    if block["same_machine"]:  # the machine the baseline was saved on: the same bits
        assert block["drift"] == []
    assert all(check(e, "baseline")["passed"] for e in full_run.summary["scenarios"])
    # every value has its band, and the reference lies in it
    for i, e in base.scenarios.items():
        for kind in ("metrics", "params"):
            for name, v in getattr(e, kind).items():
                band = e.band[f"{kind}.{name}"]
                assert band.n == len(base.ensemble) and band.min <= v <= band.max, (i, name)
