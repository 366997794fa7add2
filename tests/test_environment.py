"""The environment a user brings, and user code that changes the process under the run:
device strings, MPLBACKEND, closed or full standard streams, run names, odd files in the
output folder, torch's global settings, os.chdir, hostile names in pages, torchrun's variables
(issue 23). Subprocesses only where the process boundary is the point."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import CONFIGS, QUICK, ROOT, check, cli, entry, only_run_dir, summary


@pytest.mark.parametrize("where", ["--device", "config"])
@pytest.mark.parametrize("spec", ["cuda:01", "cuda:\u0661", "cuda:0x1"])
def test_a_device_torch_would_not_take_is_one_line(tmp_path, where, spec):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"device": spec, "scenarios": [{"scenario": "my_exp"}]}))
    args = ["--config", path] + (["--device", spec] if where == "--device" else [])
    code, out, err = cli(*args, "--output-dir", tmp_path / "o")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: ") and "must be auto, cpu, cuda, cuda:N or mps" in err
    assert not (tmp_path / "o").exists()


def one_function(tmp_path, module: str, source: str, function: str, name: str = "x") -> Path:
    """A config of custom_function on `module.py` (written from `source`) beside it."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"scenarios": [
        {"scenario": "custom_function", "function": f"{module}:{function}", "support": [],
         "inputs": [{"name": name, "shape": [3]}]}]}))
    return config


def run_here(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=None):
    return subprocess.run([sys.executable, str(ROOT / "runner.py"), "--no-progress", *args],
                          cwd=ROOT, stdout=stdout, stderr=stderr, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_a_matplotlib_backend_that_does_not_exist_and_a_closed_stdout(tmp_path):
    """The runner draws with Agg whatever MPLBACKEND says; a closed stdout (>&-) is the null
    device: the run ends as it would have, exit 0, its plot drawn."""
    proc = subprocess.run(
        f'exec {sys.executable} runner.py --no-progress --config configs/my_relu.yaml '
        f'--dry-run --set scenarios.my_relu.support=[] --output-dir {tmp_path} >&-',
        shell=True, cwd=ROOT, stderr=subprocess.PIPE, text=True, timeout=120,
        env={**os.environ, "MPLBACKEND": "no_such_backend"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert (only_run_dir(tmp_path) / "my_relu" / "loss.png").stat().st_size > 1000


@pytest.mark.slow
def test_a_closed_stderr_and_a_full_stdout(tmp_path):
    """2>&-: the run ends as it would have; > /dev/full: one line says the output is dropped,
    the run goes on to its files and its own exit code."""
    closed = subprocess.run(
        f'exec {sys.executable} runner.py --no-progress --config {QUICK} --output-dir '
        f'{tmp_path / "a"} 2>&-', shell=True, cwd=ROOT, stdout=subprocess.PIPE, text=True,
        timeout=120)
    assert closed.returncode == 0 and "PASSED: 1 of 1" in closed.stdout
    with open("/dev/full", "w") as full:
        proc = run_here("--config", QUICK, "--output-dir", tmp_path / "b", stdout=full)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "warning: cannot write the output (No space left on device); the rest of it is dropped"]
    assert summary(only_run_dir(tmp_path / "b"))["status"] == "passed"


@pytest.mark.parametrize("name, why", [
    ("index.html", "the output folder's own index.html"),
    ("ensemble_x", "mark an ensemble's folder"),
    ("INDEX.HTML", "the output folder's own index.html")])
def test_a_run_name_the_output_folder_keeps_for_itself(tmp_path, name, why):
    (tmp_path / "o").mkdir()
    code, out, err = cli("--config", QUICK, "--output-dir", tmp_path / "o", "--run-name", name)
    assert code == 2 and out == "" and err.count("\n") == 1 and why in err, err
    assert err.startswith(f"error: --run-name {name}: not a run folder's name")
    assert list((tmp_path / "o").iterdir()) == []


def test_odd_files_in_the_output_folder_leave_out_only_their_folders(tmp_path):
    """A summary whose command is a number, one whose entries are text: those folders are
    left out of index.html, and named; the index is rebuilt with every other run."""
    out = tmp_path / "o"
    assert cli("--config", QUICK, "--output-dir", out, "--run-name", "first")[0] == 0
    for folder, data in (("b", {"command": 5, "scenarios": []}), ("c", {"scenarios": "x"})):
        (out / folder).mkdir()
        (out / folder / "summary.json").write_text(json.dumps(data))
    code, _, err = cli("--config", QUICK, "--output-dir", out, "--run-name", "second")
    assert code == 0
    assert "index.html leaves out b, c: not a run's files" in err
    assert "not rebuilt" not in err
    page = (out / "index.html").read_text()
    assert "second/report.html" in page and "first/report.html" in page


LEAKY = '''
import os
import torch

torch.set_default_dtype(torch.float64)  # at import: before any entry runs


class Leaky(torch.autograd.Function):
    """Right, but it changes torch's global settings and the working directory."""

    @staticmethod
    def forward(ctx, x):
        torch.set_num_threads(2)
        torch.autograd.set_detect_anomaly(True)
        os.chdir(os.path.dirname(os.path.abspath(__file__)) + "/elsewhere")
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def double(x):
    return 2 * x
'''


def test_user_code_cannot_change_the_entries_around_it(tmp_path, monkeypatch):
    """torch's default dtype set at import, threads and anomaly mode set in a forward, and
    os.chdir: every entry runs with the run's own settings and folder; the run says what it set
    back; --only gives the same numbers; the run folder, relative, is written whole."""
    (tmp_path / "leaky_ops.py").write_text(LEAKY)
    (tmp_path / "elsewhere").mkdir()
    config = tmp_path / "leaky.yaml"
    config.write_text(yaml.safe_dump({"scenarios": [
        {"scenario": "multiply_add", "support": []},
        {"scenario": "custom_function", "function": "leaky_ops:Leaky",
         "reference": "leaky_ops:double", "support": [], "inputs": [{"name": "x", "shape": [3]}]},
        {"scenario": "my_exp", "support": []}]}))
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    code, out, err = cli("--config", config, "--dry-run", "--output-dir", "rel",
                         "--run-name", "all")
    assert code == 0, out + err
    assert torch.get_default_dtype() == torch.float32 and not torch.is_anomaly_enabled()
    assert torch.get_num_threads() == threads
    assert "custom_function: its code changed torch's default dtype torch.float64 (the run's: " \
           "torch.float32) when it was loaded" in err
    assert re.search(r"custom_function changed torch's CPU threads 2 \(the run's: \d+\); "
                     r"torch's anomaly detection on \(the run's: off\); the working directory "
                     r"\S+elsewhere \(the run's: \S+\); set back", err), err
    assert os.getcwd() == str(tmp_path)  # the Function moved the process: set back
    s = summary(tmp_path / "rel" / "all")
    assert s["status"] == "passed" and [e["status"] for e in s["scenarios"]] == ["passed"] * 3
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert cli("--config", config, "--dry-run", "--output-dir", "rel", "--run-name", "alone",
               "--only", "multiply_add")[0] == 0
    alone = summary(tmp_path / "rel" / "alone")
    assert entry(alone, "multiply_add")["metrics"] == entry(s, "multiply_add")["metrics"]


def test_a_hostile_input_name_stays_text_in_the_report(tmp_path):
    """An input named <!--<script> (printable, short: valid) cannot open an HTML comment or a
    script in report.html: the steppers' JSON escapes every '<'."""
    config = one_function(tmp_path, "ops", '''
        import torch


        class Twice(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return 2 * x

            @staticmethod
            def backward(ctx, g):
                return 2 * g
        ''', "Twice", name="<!--<script>")
    code, _, err = cli("--config", config, "--output-dir", tmp_path / "o")
    assert code == 0, err
    page = (only_run_dir(tmp_path / "o") / "report.html").read_text()
    assert "<!--<script" not in page and "&lt;!--&lt;script&gt;" in page
    steps = re.findall(r'<script type="application/json" class="steps">(.*?)</script>', page,
                       re.S)
    assert steps and all("<" not in s for s in steps)
    assert any("<!--<script>" in json.dumps(json.loads(s), ensure_ascii=False) for s in steps)
    assert check(entry(summary(only_run_dir(tmp_path / "o")), "custom_function"),
                 "gradcheck")["passed"]


def test_torchrun_variables_without_a_rendezvous_address(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    code, out, err = cli("--config", CONFIGS / "lenet_ddp.yaml", "--dry-run",
                         "--output-dir", tmp_path)
    assert code == 2 and out == "" and err == (
        "error: WORLD_SIZE 2 and RANK 0 are set but MASTER_ADDR and MASTER_PORT are not: start "
        "it with torchrun (torchrun --standalone --nproc-per-node 2 runner.py ...), or unset "
        "WORLD_SIZE for one process\n")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "http")
    assert cli("--config", CONFIGS / "lenet_ddp.yaml", "--output-dir", tmp_path)[2] == \
        "error: MASTER_PORT 'http': not a port number\n"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_rank_waiting_for_a_peer_says_so_and_stops_on_sigterm(tmp_path):
    """A rank whose peers never come says what it waits for, and SIGTERM ends the wait at once
    (exit 130), where it used to wait silently for the process group's 300 s."""
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
           "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "TORCHELASTIC_RUN_ID": "test"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "runner.py"), "--config",
                             str(CONFIGS / "lenet_ddp.yaml"), "--dry-run", "--output-dir",
                             str(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # blocks until the rank says it waits (after 3 s)
        assert line.startswith("torchrun: rank 0 waits for the other 1 rank(s) at 127.0.0.1:")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
        assert proc.returncode == 130 and time.monotonic() - sent < 5
        assert "interrupted before the run started (under torchrun: torchrun stops every rank " \
               "once one has ended" in rest
        assert not any(tmp_path.iterdir())
    finally:
        proc.kill()


IMPORT_TIME = '''
import os
import torch

os.chdir(os.path.dirname(os.path.abspath(__file__)) + "/elsewhere")  # at import
torch.use_deterministic_algorithms(True)


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        os.environ["DEMOS_SET_BY_FORWARD"] = "1"
        os.environ.pop("DEMOS_REMOVED_BY_FORWARD", None)
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g
'''


def test_user_code_at_import_cannot_move_the_run_or_change_the_rest(tmp_path, monkeypatch):
    """os.chdir and deterministic algorithms at import, the environment in a forward: set back
    and said; the relative output folder and --save-baseline land where they were asked."""
    (tmp_path / "import_ops.py").write_text(IMPORT_TIME)
    (tmp_path / "elsewhere").mkdir()
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"scenarios": [
        {"scenario": "custom_function", "function": "import_ops:Twice", "support": [],
         "inputs": [{"name": "x", "shape": [3]}]}, {"scenario": "my_exp", "support": []}]}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEMOS_REMOVED_BY_FORWARD", "kept")
    code, out, err = cli("--config", config, "--dry-run", "--output-dir", "rel", "--run-name",
                         "r", "--save-baseline", "base.yaml")
    assert code == 0, out + err
    assert "custom_function: its code changed " in err and "; the working directory " in err
    assert "torch's deterministic algorithms on (the run's: off)" in err
    assert "custom_function changed the environment variable(s) DEMOS_REMOVED_BY_FORWARD, " \
           "DEMOS_SET_BY_FORWARD; set back for the entries after it" in err
    assert os.environ["DEMOS_REMOVED_BY_FORWARD"] == "kept"
    assert "DEMOS_SET_BY_FORWARD" not in os.environ
    assert not torch.are_deterministic_algorithms_enabled()
    assert (tmp_path / "rel" / "r" / "summary.json").is_file()
    assert (tmp_path / "base.yaml").is_file()
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_user_warning_reaches_the_console_escaped(tmp_path):
    """...on one line, as every warning of the run; and so do torch's C++ warnings (vmap's
    BatchedFallback) and its own log lines (its recompiles), which its loggers printed on
    several lines, unescaped (issue 44)."""
    config = one_function(tmp_path, "warn_ops", '''
        import logging
        import warnings
        import torch


        class Loud(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                warnings.warn("careful\\x1b]0;title\\x07\\x1b[2J\\nand more")
                torch.func.vmap(lambda t: torch.renorm(t[None], 2, 0, 1.0))(x[None])
                logging.getLogger("torch._dynamo").warning(  # as torch says a recompile
                    "hit config.recompile_limit (8)\\n   function: 'f\\x1b[2J' (x.py:1)")
                return 2 * x

            @staticmethod
            def backward(ctx, g):
                return 2 * g
        ''', "Loud")
    code, out, err = cli("--config", config, "--dry-run", "--output-dir", tmp_path / "o")
    lines = err.splitlines()
    assert code == 0 and any(line.startswith("warning: UserWarning: careful\\x1b]0;title\\x07"
                                             "\\x1b[2J and more (") for line in lines), err
    assert any(line.startswith("warning: UserWarning: There is a performance drop because we "
                               "have not yet implemented the batching rule for aten::renorm")
               for line in lines), err
    assert "warning: torch: hit config.recompile_limit (8) function: 'f\\x1b[2J' (x.py:1)" \
        in lines, err
    assert all(line.startswith("warning: ") for line in lines) and "\x1b" not in err + out


@pytest.mark.parametrize("args, words", [
    (["--output-dir", ""], "error: --output-dir: an empty path; name a folder"),
    (["--set", "seed=1", "--set", "seed=2"],
     "error: --set seed=2: the same key as --set seed=1 (seed); give it once"),
    (["--set", "scenarios.my_exp.support=[]", "--set", "scenarios[0].support=[]"],
     "the same key as --set scenarios.my_exp.support=[] (scenarios[0].support)"),
])
def test_paths_and_keys_given_wrong_are_one_line(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("--config", QUICK, "--dry-run", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_output_folder_is_never_a_run_folder(tmp_path):
    assert cli("--config", QUICK, "--dry-run", "--output-dir", tmp_path, "--run-name", "a")[0] == 0
    run = tmp_path / "a"
    for target in (run, run / "my_exp", run / "my_exp" / "sub", run / "my_exp" / ".." / "x"):
        code, out, err = cli("--config", QUICK, "--dry-run", "--output-dir", target)
        assert code == 2 and err.startswith(f"error: --output-dir {target}: is") and \
            "a run's folder" in err, err
    assert sorted(p.name for p in run.iterdir()) == sorted(
        ["config.yaml", "my_exp", "report.html", "run.log", "summary.json"])
    project = tmp_path / "project"  # another tool's summary.json alone: no run's folder
    project.mkdir()
    (project / "summary.json").write_text("{}")
    assert cli("--config", QUICK, "--dry-run", "--output-dir", project / "outputs")[0] == 0
    (tmp_path / "loop").symlink_to(tmp_path / "pool")
    (tmp_path / "pool").symlink_to(tmp_path / "loop")
    code, out, err = cli("--config", QUICK, "--dry-run", "--output-dir", tmp_path / "loop" / "x")
    assert code == 2 and err.count("\n") == 1 and err.startswith(  # its words: Python's
        f"error: --output-dir {tmp_path / 'loop' / 'x'}: "), err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has the device")
def test_a_device_not_there_stops_an_ensemble_before_any_run(tmp_path):
    code, out, err = cli("--config", QUICK, "--save-baseline", tmp_path / "b.yaml", "--ensemble",
                         "threads2", "--dry-run", "--device", "cuda", "--output-dir",
                         tmp_path / "o")
    assert code == 2 and err.startswith("error: --device cuda: CUDA is not available"), err
    assert not (tmp_path / "o").exists() and not (tmp_path / "b.yaml").exists()


@pytest.mark.parametrize("env, words", [
    ({"WORLD_SIZE": "2"}, "error: WORLD_SIZE 2 is set but RANK is not"),
    ({"WORLD_SIZE": "-1"}, "error: WORLD_SIZE -1: the number of processes is at least 1"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "no.such.host.invalid",
      "MASTER_PORT": "29555"}, "error: MASTER_ADDR 'no.such.host.invalid': not an address"),
])
def test_torchrun_variables_that_cannot_work_fail_at_once(tmp_path, monkeypatch, env, words):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    code, out, err = cli("--config", CONFIGS / "lenet_ddp.yaml", "--dry-run", "--output-dir",
                         tmp_path)
    assert code == 2 and err.startswith(words) and err.count("\n") == 1, err
    assert time.monotonic() - started < 30 and not any(tmp_path.iterdir())


def test_save_baseline_through_a_loop_of_links_and_a_save_that_fails(tmp_path, monkeypatch):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    code, _, err = cli("--config", QUICK, "--dry-run", "--output-dir", tmp_path / "o",
                       "--save-baseline", loop)
    assert code == 2 and "cannot be followed" in err and not (tmp_path / "o").exists()
    from demos.lab.runner import outputs

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(outputs, "save", full)
    code, out, err = cli("--config", QUICK, "--dry-run", "--output-dir", tmp_path / "o",
                         "--save-baseline", tmp_path / "b.yaml")
    assert code == 1 and "could not save the baseline" in err
    assert re.search(r"^FAILED: 1 of 1 scenarios passed; results in .*; the baseline could not "
                     r"be saved$", out, re.M), out


def test_every_page_shows_control_characters_escaped(tmp_path):
    """A run folder renamed by hand to hold an escape sequence: index.html shows it escaped,
    as the console does, and keeps no control character."""
    import shutil

    out = tmp_path / "o"
    assert cli("--config", QUICK, "--dry-run", "--output-dir", out, "--run-name", "a")[0] == 0
    shutil.copytree(out / "a", out / "b\x1b]0;title\x07c")
    assert cli("--config", QUICK, "--dry-run", "--output-dir", out, "--run-name", "d")[0] == 0
    page = (out / "index.html").read_text()
    assert "\x1b" not in page and "\x07" not in page
    assert "b\\x1b]0;title\\x07c" in page


def test_drawing_leaves_the_callers_mplbackend_as_it_was(tmp_path, monkeypatch):
    """The runner draws with Agg, but it does not change MPLBACKEND for the rest of the
    process (a notebook's inline backend stays the notebook's)."""
    from demos.lab.pages import artifacts, plots  # noqa: F401  (importing them changed it once)

    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    plots.line_plot(tmp_path / "p.png", [0, 1], {"a": [1.0, 2.0]}, title="t", xlabel="x",
                    ylabel="y")
    assert os.environ["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"
    assert (tmp_path / "p.png").stat().st_size > 1000


@pytest.mark.parametrize("torch_index, up_to_date", [(None, True), ("cpu", True),
                                                     ("default", False)])
def test_setup_keeps_the_torch_a_venv_has_unless_another_is_named(tmp_path, torch_index,
                                                                  up_to_date):
    """Issue 36: after `make demo TORCH_INDEX=cpu`, a later `make setup` or `make test`
    without it force-reinstalled torch (36 s; and again going back). Left out, the venv's
    build stays; naming another replaces it. (make -q: is the install stamp up to date?)"""
    import shutil

    if not shutil.which("make"):
        pytest.skip("no make here")
    venv = tmp_path / "venv"
    venv.mkdir()
    stamp = venv / ".installed"
    stamp.write_text("https://download.pytorch.org/whl/cpu\n")  # as make demo TORCH_INDEX=cpu
    later = max((ROOT / f).stat().st_mtime for f in ("pyproject.toml", "Makefile")) + 10
    os.utime(stamp, (later, later))
    args = ["make", "-q", "-C", str(ROOT), f"VENV={venv}", str(stamp)]
    done = subprocess.run(args + ([f"TORCH_INDEX={torch_index}"] if torch_index else []),
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode == 0) == up_to_date, done.stdout + done.stderr


def test_the_package_list_is_the_tree():
    """pyproject.toml names its packages (to map configs/ in as demos.configs): every package
    of the tree, and that one."""
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = sorted(str(p.parent.relative_to(ROOT)).replace(os.sep, ".")
                   for p in (ROOT / "demos").rglob("__init__.py"))
    assert sorted(listed["packages"]) == sorted([*found, "demos.configs"])
    assert listed["package-dir"] == {"demos.configs": "configs"}


INSTALLED = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
sys.path.insert(0, {target!r})
how = sys.argv[1]
import demos
assert demos.__file__.startswith({target!r}), demos.__file__
if how == "cli":
    from demos.cli import main
    sys.exit(main(["legendre_fit", "--no-progress", "--output-dir", "cli"]))
if how == "api":
    r = demos.run("legendre_fit", output_dir="api", quiet=True)
    sys.exit(0 if r.passed else 1)
import runpy
sys.argv = ["legendre_fit", "--no-progress", "--output-dir", "module"]
runpy.run_module("demos.scenarios.legendre_fit", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_an_installed_copy_runs_a_scenario_by_name_with_its_shipped_config(tmp_path):
    """Issue 36: from a wheel, in another folder, the command line, the API and the module
    each run legendre_fit's shipped config, expected values and all (14 checks), as a checkout
    does."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "--no-build-isolation", "-w", str(tmp_path / "dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    target = tmp_path / "installed"
    wheel = next((tmp_path / "dist").glob("*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (target / "demos" / "configs" / "examples" / "my_ops.py").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = INSTALLED.format(target=str(target))
    for how in ("cli", "api", "module"):
        ran = subprocess.run([sys.executable, "-c", script, how], cwd=elsewhere,
                             capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, (how, ran.stdout, ran.stderr)
        data = summary(only_run_dir(elsewhere / how))
        e = data["scenarios"][0]
        assert e["status"] == "passed" and len(e["checks"]) == 11, (how, e["checks"])
        assert "expect params.b" in {c["name"] for c in e["checks"]}
        assert data["config"].endswith(os.path.join("demos", "configs", "legendre_fit.yaml"))
