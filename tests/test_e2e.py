"""runner.py end to end, as a user runs it: files, summary.json, console and exit codes."""
import csv
import re
import datetime as dt

import pytest
import torch

from demos.functions import LegendrePolynomial3
from demos.lab.cli import main
from demos.lab.run import make_run_dir
from demos.lab.schema import ConfigError
from tests.conftest import CONFIGS, check, entry, only_run_dir, run_cli, summary
from tests.wrong_functions import P3MissingFactor

SIGNATURES = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-", ".csv": b"step,",
              ".gif": b"GIF89a"}
EXTRAS = {"legendre_fit": ["fit.png", "fit.gif"], "lenet": ["accuracy.png", "checkpoint.pt"]}
GRAPHS = {"computation_graph": ["graph_requires_grad", "graph_no_grad", "graph_detach"]}
NO_TRAINING = {"computation_graph", "autograd_internals", "my_exp", "custom_function"}
ENTRY_KEYS = {"id", "scenario", "status", "device", "steps", "metrics", "params", "checks",
              "artifacts", "timing", "error"}


def assert_scenario_folder(run_dir, e, dot=True):
    folder = run_dir / e["id"]
    trains = e["scenario"] not in NO_TRAINING
    expected = ["explain.txt"] + EXTRAS.get(e["scenario"], [])
    expected += ["metrics.csv", "loss.png"] if trains else []
    for graph in GRAPHS.get(e["scenario"], ["graph"]):
        expected += [f"{graph}.gv"] + ([f"{graph}.pdf", f"{graph}.svg"] if dot else [])
    for name in expected:
        path = folder / name
        assert path.is_file() and path.stat().st_size > 0, path
        if path.suffix in SIGNATURES:
            assert path.read_bytes().startswith(SIGNATURES[path.suffix]), path
        if path.suffix == ".svg":
            assert "<svg" in path.read_text()
    assert sorted(e["artifacts"]) == sorted(expected)
    assert "Leaves reached" in (folder / "explain.txt").read_text()
    if trains:
        rows = list(csv.DictReader((folder / "metrics.csv").open()))
        assert len(rows) >= 2 and float(rows[-1]["step"]) == e["steps"] - 1
        assert e["timing"]["train_s"] > 0 and e["timing"]["steps_per_s"] > 0
    else:
        assert e["steps"] == 0 and e["timing"] is None


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_config_dry_run(tmp_path, config):
    proc = run_cli("--config", CONFIGS / config, "--dry-run", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = only_run_dir(tmp_path)
    for name in ("config.yaml", "run.log", "summary.json"):
        assert (run_dir / name).is_file()
    data = summary(run_dir)
    assert data["status"] == "passed" and data["run_id"] == run_dir.name
    assert data["torch"].startswith("2.") and data["device"] == "cpu" and data["seed"] == 0
    for e in data["scenarios"]:
        assert ENTRY_KEYS <= set(e) and e["status"] == "passed" and e["error"] is None
        assert all(c["passed"] is not False for c in e["checks"])
        assert_scenario_folder(run_dir, e)
        assert re.search(rf"^PASSED +{e['id']} ", proc.stdout, re.M)
    assert str(run_dir) in proc.stdout.splitlines()[-1]


def test_all_yaml_reproduces_the_documents(tmp_path):
    proc = run_cli("--config", CONFIGS / "all.yaml", "--output-dir", tmp_path, "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = only_run_dir(tmp_path)
    data = summary(run_dir)
    assert data["status"] == "passed"
    assert [e["status"] for e in data["scenarios"]] == ["passed"] * 9
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
    proc = run_cli("--config", CONFIGS / "legendre_fit.yaml", "--output-dir", tmp_path,
                   "--no-progress", "--set", "scenarios.legendre_fit.expect.params.b.value=-2.0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = summary(only_run_dir(tmp_path))
    e = entry(data, "legendre_fit")
    assert data["status"] == "failed" and e["status"] == "failed"
    assert check(e, "expect params.b")["passed"] is False
    assert check(e, "expect params.d")["passed"] is True
    assert "FAIL expect params.b: -2.2085268; expected -2" in proc.stdout


def test_a_wrong_backward_fails_gradcheck_and_parity_with_exit_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(LegendrePolynomial3, "backward", staticmethod(P3MissingFactor.backward))
    code = main(["--config", str(CONFIGS / "all.yaml"), "--only", "legendre_fit", "--dry-run",
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
    monkeypatch.setattr("demos.scenarios.my_relu.run", boom)
    code = main(["--config", str(CONFIGS / "all.yaml"), "--dry-run", "--no-progress",
                 "--output-dir", str(tmp_path)])
    assert code == 1
    run_dir = only_run_dir(tmp_path)
    data = summary(run_dir)
    assert data["status"] == "failed"
    assert [e["status"] for e in data["scenarios"]] == ["passed", "error"] + ["passed"] * 7
    relu = entry(data, "my_relu")
    assert relu["error"] == "RuntimeError: boom at the end" and relu["steps"] == 3
    assert (run_dir / "my_relu" / "metrics.csv").is_file()  # what it produced is kept
    assert "Traceback" in (run_dir / "run.log").read_text()


def test_without_dot_the_graph_source_is_kept_and_the_scenario_passes(tmp_path):
    proc = run_cli("--config", CONFIGS / "multiply_add.yaml", "--dry-run", "--output-dir",
                   tmp_path, env={"PATH": str(tmp_path / "empty")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "'dot' not found" in warnings[0]
    assert "apt-get install graphviz" in warnings[0]
    run_dir = only_run_dir(tmp_path)
    e = entry(summary(run_dir), "multiply_add")
    assert e["status"] == "passed"
    assert_scenario_folder(run_dir, e, dot=False)
    assert not (run_dir / "multiply_add" / "graph.pdf").exists()


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
@pytest.mark.parametrize("name", ["legendre_fit", "my_relu", "multiply_add", "lenet",
                                  "linear_function"])
def test_training_steps_never_sync_the_gpu(tmp_path, name):
    """Every training step runs under torch.cuda.set_sync_debug_mode('error')."""
    import importlib
    import logging

    from demos.lab.context import Context
    from demos.scenarios.configs import REGISTRY

    cls = REGISTRY[name]
    cfg = cls(scenario=name, id=name, **cls.DRY_RUN)
    ctx = Context(cfg, torch.device("cuda"), tmp_path, logging.getLogger("t"), seed=0,
                  progress=True, finite_every=10**9, forbid_sync=True)
    torch.manual_seed(0)
    importlib.import_module(f"demos.scenarios.{name}").run(cfg, ctx)
    assert ctx.steps_run == ctx.cfg.steps if hasattr(ctx.cfg, "steps") else ctx.steps_run > 0
