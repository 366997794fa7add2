"""What the runner guarantees under stress: divergence, signals, errors, reproducibility, files."""
import concurrent.futures
import contextlib
import dataclasses
import datetime
import errno
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from demos.cli import main
from demos.lab.core.files import make_run_dir, save_atomic, write_atomic
from demos.lab.core.results import EXIT_CODES, EXIT_INTERRUPTED
from demos.lab.core.signals import SignalHandler
from demos.lab.runner.context import Context, Diverged, Shared, StopRequest  # noqa: F401
from demos.lab.runner.recorder import Recorder
from demos.scenarios import registry
from demos.scenarios.legendre_fit import Config as LegendreFit
from tests.conftest import (
    CONFIGS,
    NO_SUPPORT,
    QUICK,
    ROOT,
    a_summary,
    check,
    entry,
    only_run_dir,
    patch_run,
    raised_in,
    run_cli,
    summary,
)

LONG = ["--set", "scenarios.legendre_fit.steps=100000000", "--no-progress"]


def run_main(tmp_path, *args):
    return main(["--no-progress", "--output-dir", str(tmp_path), *map(str, args)])  # in-process


# -- divergence ----------------------------------------------------------------------------
def test_a_diverging_loss_stops_at_its_step_and_the_others_still_run(tmp_path):
    code = run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--dry-run",
                    "--only", "legendre_fit,my_relu", "--set", "scenarios.legendre_fit.lr=1.0",
                    "--set", "scenarios.legendre_fit.steps=100")
    assert code == 1
    run_dir = only_run_dir(tmp_path)
    data = summary(run_dir)
    legendre = entry(data, "legendre_fit")
    assert legendre["status"] == "failed" and legendre["steps"] == 2  # 0 and 1 completed
    finite = check(legendre, "loss stays finite")
    assert finite["passed"] is False
    assert finite["detail"] == "loss is inf at step 2; training stopped there"
    assert legendre["metrics"] == {"diverged_at_step": 2.0}
    assert all(c["passed"] is None for c in legendre["checks"] if c["name"].startswith("expect"))
    rows = (run_dir / "legendre_fit" / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,loss,a,b,c,d" and rows[-1].startswith("2,inf,") and len(rows) == 4
    assert (run_dir / "legendre_fit" / "loss.png").is_file()
    assert [e["status"] for e in data["scenarios"]] == ["failed", "passed"]
    assert check(entry(data, "my_relu"), "loss stays finite")["passed"] is True
    # what does not depend on training is still checked and reported
    assert check(legendre, "gradcheck")["passed"] and check(legendre, "parity")["passed"]


def test_a_diverged_fit_plot_says_where_it_stopped_and_what_it_could_not_draw(tmp_path,
                                                                             monkeypatch):
    """fit.png of a diverged legendre_fit: its title gives the steps run, not the steps asked
    for, and its coefficients in a few characters (they are huge or not numbers); the fit,
    with nothing finite to draw, says so in the legend (drawn in this process, to see it)."""
    from demos.lab.pages import artifacts, plots

    figures = {}

    def line_plot(path, *args, **kwargs):
        figures[path.name] = plots.line_figure(*args, **kwargs)

    monkeypatch.setattr(artifacts, "pool", lambda: None)
    monkeypatch.setattr(plots, "line_plot", line_plot)
    code = run_main(tmp_path, "--config", CONFIGS / "legendre_fit.yaml", "--set",
                    "scenarios.legendre_fit.lr=1e-3", "--set", "scenarios.legendre_fit.support=[]")
    assert code == 1
    fig = figures["fit.png"]
    ax = fig.axes[0]
    title = ax.get_title()
    assert title.startswith("a + b P3(c + d x) stopped after 2 of 2000 steps\n"), title
    assert all(len(line) <= plots.TITLE_CHARS for line in title.split("\n")), title
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["sin(x)", "start", "fit (not finite: not drawn)"]
    fig.canvas.draw()  # the title inside the figure, whatever its length
    box, inside = ax.title.get_window_extent(), fig.bbox
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (box, inside)


def test_a_soft_stop_ends_the_loop_at_the_exact_step_and_the_scenario_goes_on(tmp_path):
    """The runner's own entries: the loop ends at the first value that is not finite (in
    windows too), nothing is recorded after it, and the code after the loop runs."""
    import logging

    recorder = Recorder(torch.device("cpu"), 1, finite_every=10, soft_stop=True)
    ctx = Context(LegendreFit(id="t"), tmp_path, logging.getLogger("t"),
                  Shared(torch.device("cpu")), recorder)
    values = [1.0, 2.0, 3.0, float("nan"), 5.0] + [1.0] * 20
    for t in ctx.steps(len(values)):
        ctx.record(t, loss=torch.tensor(values[t]))
    ctx.record(99, always=True, accuracy=0.5)  # after the stop: not kept
    for _ in ctx.steps(5):  # a second loop does not start
        raise AssertionError("ran")
    assert recorder.diverged is not None and recorder.diverged.step == 3
    assert ctx.steps_run == 3 and [r["step"] for r in ctx.history()] == [0, 1, 2, 3]


def test_on_an_accelerator_values_are_checked_in_windows_at_the_exact_step(tmp_path):
    """finite_every > 1 is the CUDA path: one sync per window, the first bad step reported."""
    import logging
    ctx = Context(LegendreFit(id="t"), tmp_path, logging.getLogger("t"),
                  Shared(torch.device("cpu")), Recorder(torch.device("cpu"), 1, finite_every=10))
    values = [1.0, 2.0, 3.0, float("nan"), 5.0, float("inf")] + [1.0] * 20
    done = []
    with pytest.raises(Diverged) as e:
        for t in ctx.steps(len(values)):
            ctx.record(t, loss=torch.tensor(values[t]))
            done.append(t)
    assert (e.value.step, e.value.name) == (3, "loss") and e.value.value != e.value.value
    assert len(done) == 10  # found at the window's end, reported at step 3
    assert [r["step"] for r in ctx.history()] == [0, 1, 2, 3]


def test_a_finite_run_reports_the_check_passed(tmp_path):
    assert run_main(tmp_path, "--config", CONFIGS / "my_relu.yaml", "--dry-run") == 0
    e = entry(summary(only_run_dir(tmp_path)), "my_relu")
    assert check(e, "loss stays finite") == {"name": "loss stays finite", "passed": True,
                                             "detail": "loss finite at all 5 steps"}


# -- interrupts -----------------------------------------------------------------------------
def start_long_run(tmp_path):
    proc = subprocess.Popen([sys.executable, str(ROOT / "runner.py"), "--config",
                             str(CONFIGS / "all.yaml"), *NO_SUPPORT,
                             "--only", "legendre_fit,my_relu",
                             "--output-dir", str(tmp_path), *LONG],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:  # wait until the training loop runs
        logs = list(tmp_path.glob("*/run.log"))
        if logs and "training: steps" in logs[0].read_text():  # the loop began: a state
            return proc                                         # seen, not a time waited
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the run did not start")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_at_a_step_boundary_and_keeps_everything(tmp_path, sig):
    proc = start_long_run(tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert f"{sig.name}: stopping at the next step boundary" in err
    run_dir = only_run_dir(tmp_path)
    data = summary(run_dir)
    assert data["status"] == "interrupted" and len(data["scenarios"]) == 1
    legendre = data["scenarios"][0]
    assert legendre["status"] == "interrupted" and 0 < legendre["steps"] < 100_000_000
    assert legendre["error"] == f"interrupted by {sig.name} before step {legendre['steps']}"
    rows = (run_dir / "legendre_fit" / "metrics.csv").read_text().splitlines()
    assert len(rows) == legendre["steps"] + 1  # header + one row per step done
    assert (run_dir / "legendre_fit" / "loss.png").is_file()
    assert "not run (interrupted): my_relu" in out


def test_a_second_signal_ends_at_once():
    exits = []
    stop = StopRequest()
    stop.phase = "running"
    handler = SignalHandler(stop, hard_exit=exits.append)
    handler(signal.SIGINT, None)
    assert stop.requested == "SIGINT" and exits == []
    handler(signal.SIGTERM, None)
    assert exits == [EXIT_INTERRUPTED]


def test_a_signal_outside_a_loop_stops_the_run_after_that_scenario(tmp_path, monkeypatch):
    real = registry()["multiply_add"].run

    def run_then_signal(cfg, ctx):
        result = real(cfg, ctx)
        os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came during its checks
        return result
    patch_run(monkeypatch, "multiply_add", run_then_signal)
    before = signal.getsignal(signal.SIGINT)  # ignored in a suite started in the background
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--dry-run",
                    "--only", "my_relu,multiply_add,lenet") == 130
    data = summary(only_run_dir(tmp_path))
    assert data["status"] == "interrupted"
    assert [e["status"] for e in data["scenarios"]] == ["passed"] * 2  # lenet: not run
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored


def test_ctrl_c_during_a_long_gradcheck_ends_it_and_the_entry_is_interrupted(tmp_path):
    """custom_function's gradcheck runs the forward twice per input element; a Ctrl-C among
    them ends it at the next call, the entry says interrupted, and the run exits 130."""
    (tmp_path / "slow.py").write_text(
        "import os\nimport signal\nfrom pathlib import Path\n\nimport torch\n\n"
        "CALLS = Path(__file__).with_name('calls.txt')\n\n\n"
        "class Double(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        with CALLS.open('a') as f:\n"
        "            f.write('.')\n"
        "        if len(CALLS.read_text()) == 20:  # in gradcheck: Ctrl-C\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return x * 2\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * 2\n")
    (tmp_path / "slow.yaml").write_text(
        "device: cpu\nscenarios:\n  - {scenario: custom_function, function: slow:Double, "
        "support: [], inputs: [{name: x, shape: [200]}]}\n")
    before = signal.getsignal(signal.SIGINT)
    assert run_main(tmp_path / "out", "--config", tmp_path / "slow.yaml") == EXIT_INTERRUPTED
    e = summary(only_run_dir(tmp_path / "out"))["scenarios"][0]
    assert (e["status"], e["error"]) == ("interrupted", "interrupted by SIGINT")
    assert len((tmp_path / "calls.txt").read_text()) == 20  # of the 400 gradcheck needs
    assert signal.getsignal(signal.SIGINT) is before


# -- errors mid-run -------------------------------------------------------------------------
def test_an_out_of_memory_error_fails_that_scenario_only(tmp_path, monkeypatch):
    def oom(cfg, ctx):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    patch_run(monkeypatch, "lenet", oom)
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--dry-run",
                    "--only", "lenet,my_exp") == 1
    data = summary(only_run_dir(tmp_path))
    lenet = entry(data, "lenet")
    assert lenet["status"] == "error"
    assert raised_in(lenet["error"], "OutOfMemoryError: CUDA out of memory. Tried to allocate "
                     "20.00 GiB", "test_hardening.py", "oom")
    assert entry(data, "my_exp")["status"] == "passed"


# -- time limits ------------------------------------------------------------------------------
def test_an_entry_past_its_time_limit_is_an_error_and_the_run_goes_on(tmp_path, monkeypatch,
                                                                     capsys):
    """A loop that never ends (here with `except Exception` around each step, which cannot
    swallow the limit): its entry ends at time_limit, an error with its files as far as they
    got, and the next entry runs; exit 1. --dry-run keeps the key (it is no size)."""
    def loops(cfg, ctx):
        for t in ctx.steps(10**9):
            try:
                ctx.record(t, loss=1.0 / (t + 1))
                time.sleep(0.01)
            except Exception:
                pass
    patch_run(monkeypatch, "my_exp", loops)
    started = time.monotonic()
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--dry-run",
                    "--only", "my_exp,linear_function",
                    "--set", "scenarios.my_exp.time_limit=1") == 1
    assert time.monotonic() - started < 120  # a hang guard, not a speed test
    run_dir = only_run_dir(tmp_path)
    data = summary(run_dir)
    mine = entry(data, "my_exp")
    assert mine["status"] == "error" and mine["steps"] > 0
    assert raised_in(mine["error"], "did not finish in 1 s", "test_hardening.py", "loops")
    assert entry(data, "linear_function")["status"] == "passed"
    rows = (run_dir / "my_exp" / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,loss" and len(rows) > 2  # what it recorded until then
    out = capsys.readouterr().out
    assert re.search(r"ERROR did not finish in 1 s \(at \S*test_hardening.py:\d+ in loops\)", out)
    assert "did not finish in 1 s (time_limit); it was here:\nTraceback" in (
        run_dir / "run.log").read_text()
    assert "time_limit: 1.0" in (run_dir / "config.yaml").read_text()
    lenet = registry()["lenet"]
    assert lenet.shrink(lenet.config(scenario="lenet")).time_limit == 600


def test_a_backward_that_never_returns_ends_at_check_functions_time_limit(tmp_path):
    """check_function (a notebook's call: the main thread) on a Function whose backward loops
    forever: the entry ends at time_limit, an error naming the line, and nothing of the limit
    stays behind (its watchdog thread gone, SIGALRM untouched)."""
    import demos
    from tests.fixtures.user_fns import BackwardNeverReturns, square

    threads, alarm = threading.active_count(), signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    r = demos.check_function(BackwardNeverReturns, {"x": torch.randn(3, dtype=torch.float64,
                                                                     requires_grad=True)},
                             square, time_limit=0.5, quiet=True, output_dir=tmp_path)
    assert time.monotonic() - started < 120  # a hang guard, not a speed test
    (e,) = r.summary.scenarios
    assert (r.exit_code, e.status) == (1, "error")
    assert raised_in(e.error, "did not finish in 0.5 s", "user_fns.py", "backward")
    assert threading.active_count() == threads and signal.getsignal(signal.SIGALRM) is alarm


def test_a_time_limit_reaches_its_own_thread_alone_and_leaves_nothing_pending():
    """The watchdog raises in the thread that set the limit, whichever it is; a block that
    ends in time is never interrupted afterwards, nor is one that ended just as it struck."""
    from demos.lab.runner.entry import TimeUp, time_limit

    def spin(limit):
        with time_limit(limit):
            while True:
                try:
                    sum(range(1000))
                except Exception:  # cannot swallow it
                    pass

    caught = []

    def in_a_thread():
        try:
            spin(0.2)
        except TimeUp as e:
            caught.append(e)
    helper = threading.Thread(target=in_a_thread)
    helper.start()
    helper.join(60)
    assert not helper.is_alive() and len(caught) == 1
    with pytest.raises(TimeUp):
        spin(0.2)
    with time_limit(0.2):
        pass
    for _ in range(3):  # struck as it ended: withdrawn, or raised inside the block
        try:
            with time_limit(0.2):
                time.sleep(0.2)
        except TimeUp:
            pass
    deadline = time.monotonic() + 1.5  # past every limit above: nothing arrives now
    while time.monotonic() < deadline:
        sum(range(1000))


@pytest.mark.slow
def test_a_backward_that_recurses_through_autograd_ends_at_the_time_limit(tmp_path):
    """The outside corpus's hang (issue 51): a backward that calls autograd on its own Function
    again. The engine runs each level on a thread of its own while the main thread waits in
    C++ (SIGALRM's handler would never run): the limit reaches them, the memory it took is
    given back as it unwinds, and the next entry runs."""
    (tmp_path / "recurses.py").write_text(
        "import torch\n\n\n"
        "class Recurses(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * 2\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, = ctx.saved_tensors\n"
        "        with torch.enable_grad():\n"
        "            x2 = x.detach().requires_grad_()\n"
        "            gx, = torch.autograd.grad(Recurses.apply(x2).sum(), x2)\n"
        "        return gx * g\n")
    (tmp_path / "recurses.yaml").write_text(
        "device: cpu\nscenarios:\n"
        "  - {scenario: custom_function, function: recurses:Recurses, support: [], "
        "time_limit: 2, inputs: [{name: x, shape: [3]}]}\n"
        "  - {scenario: my_exp, support: []}\n")
    done = run_cli("--config", tmp_path / "recurses.yaml", "--output-dir", tmp_path / "out",
                   "--no-progress", timeout=300)  # a hang guard
    assert done.returncode == 1, done.stdout + done.stderr
    data = summary(only_run_dir(tmp_path / "out"))
    e = data["scenarios"][0]
    assert e["status"] == "error" and e["error"].startswith("did not finish in 2 s"), e
    assert entry(data, "my_exp")["status"] == "passed"


# -- reproducibility ------------------------------------------------------------------------
TRAINING = ",".join(n for n, s in registry().items() if s.trains and not s.data_parallel)


@pytest.mark.slow
def test_same_config_and_seed_give_bit_identical_results(tmp_path, dry_run):
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--dry-run",
                    "--device", "cpu", "--only", TRAINING) == 0  # matrices touch no result
    a, b = dry_run.dir, only_run_dir(tmp_path)
    for scenario in TRAINING.split(","):
        assert (a / scenario / "metrics.csv").read_bytes() == \
            (b / scenario / "metrics.csv").read_bytes(), scenario
    sa, sb = summary(a), summary(b)
    for e in sb["scenarios"]:
        assert (e["params"], e["metrics"]) == (entry(sa, e["id"])["params"],
                                               entry(sa, e["id"])["metrics"])
    det = sa["determinism"]
    assert sa["torch"] == torch.__version__ and sa["seed"] == 0 and sa["device"] == "cpu"
    assert det["deterministic_algorithms"] is False and det["cpu_threads"] >= 1
    assert det["threads"] == "auto"


def test_a_different_seed_changes_the_random_scenarios(tmp_path, dry_run):
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT,
                    "--only", "my_relu,lenet",
                    "--dry-run", "--seed", "1") == 0
    s0, s1 = dry_run.summary, summary(only_run_dir(tmp_path))
    assert s1["seed"] == 1
    for scenario in ("my_relu", "lenet"):
        assert entry(s0, scenario)["metrics"]["final_loss"] != \
            entry(s1, scenario)["metrics"]["final_loss"]


def test_the_thread_count_is_chosen_and_recorded(tmp_path):
    assert run_main(tmp_path, "--config", QUICK, "--set", "threads=2") == 0
    det = summary(only_run_dir(tmp_path))["determinism"]
    assert (det["threads"], det["cpu_threads"]) == (2, 2)
    from demos.lab.runner.device import auto_threads
    assert [auto_threads(n) for n in (1, 2, 4, 16, 64)] == [1, 1, 2, 8, 8]


def test_deterministic_mode_is_recorded_and_restored(tmp_path):
    assert run_main(tmp_path, "--config", QUICK, "--set",
                    "deterministic=true") == 0
    assert summary(only_run_dir(tmp_path))["determinism"]["deterministic_algorithms"] is True
    assert torch.are_deterministic_algorithms_enabled() is False


# -- files ----------------------------------------------------------------------------------
def test_runs_started_together_get_their_own_folders(tmp_path):
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(lambda _: make_run_dir(tmp_path, now).name, range(8)))
    expected = ["2026-01-02_03-04-05"] + [f"2026-01-02_03-04-05-{i}" for i in range(1, 8)]
    assert sorted(runs) == expected


def test_writes_are_atomic(tmp_path):
    path = tmp_path / "summary.json"
    write_atomic(path, "old")

    def crash(p):
        p.write_text("half")
        raise OSError("disk full")
    with pytest.raises(OSError):
        save_atomic(path, crash)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_no_temporary_files_are_left_in_a_run(dry_run):
    leftovers = [p for p in dry_run.dir.rglob("*") if p.name.startswith(".")]
    assert leftovers == []


class ClosedAfterOneLine(io.StringIO):
    """A stdout whose reader goes away after the first line, like `| head -1`."""

    def write(self, text):
        if self.getvalue().count("\n") >= 1:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


@pytest.mark.parametrize("extra, code", [([], 0), (["--set", "scenarios.my_exp.expect.metrics."
                                                    "max_grad_error.max=-1"], 1)])
def test_output_piped_into_head_neither_breaks_the_run_nor_its_exit_code(tmp_path, capsys,
                                                                          monkeypatch, extra,
                                                                          code):
    monkeypatch.setattr(sys, "stdout", ClosedAfterOneLine())
    monkeypatch.setattr(os, "dup2", lambda *a: None)  # main() silences the real stdout here
    assert run_main(tmp_path, "--config", QUICK, *extra) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err, err
    assert (only_run_dir(tmp_path) / "report.html").is_file()  # the run finished its work


def test_ctrl_c_during_start_up_is_one_line_and_130(tmp_path, monkeypatch, capsys):
    def interrupted(cfg, where):
        raise KeyboardInterrupt
    patch_prepare = dataclasses.replace(registry()["custom_function"], prepare=interrupted)
    monkeypatch.setitem(registry(), "custom_function", patch_prepare)
    assert run_main(tmp_path, "--config", CONFIGS / "custom_function.yaml") == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == "interrupted before the run started"
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_a_scenario_calling_sys_exit_is_an_error_of_that_scenario(tmp_path, monkeypatch):
    def leaves(cfg, ctx):
        raise SystemExit(3)
    patch_run(monkeypatch, "my_exp", leaves)
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--dry-run",
                    "--only", "my_exp,linear_function") == 1
    data = summary(only_run_dir(tmp_path))
    assert raised_in(entry(data, "my_exp")["error"], "SystemExit: 3", "test_hardening.py",
                     "leaves")
    assert entry(data, "linear_function")["status"] == "passed"


def children_of(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_second_signal_leaves_no_helper_process_behind(tmp_path):
    proc = start_long_run(tmp_path)
    helpers = children_of(proc.pid)
    assert helpers  # the drawing helper (and multiprocessing's resource tracker)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in helpers):
        time.sleep(0.1)
    alive = [p for p in helpers if Path(f"/proc/{p}").exists()
             and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[:1]]
    assert alive == []


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigterm_during_start_up_ends_the_process_and_its_helpers(tmp_path):
    """The real command line: SIGTERM while torch loads ends it at once (130, one line), and
    the helper, which ignores the group's SIGTERM, is ended too, not waited for."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "runner.py"), "--config",
                             str(QUICK), "--output-dir", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not children_of(proc.pid) and time.time() < deadline:  # the helper has started
        time.sleep(0.02)
    helpers = children_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.strip()) == (130, "interrupted before the run started"), err
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in helpers):
        time.sleep(0.1)
    assert not any(Path(f"/proc/{p}").exists() for p in helpers)


def test_global_torch_state_is_touched_only_when_asked(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("use_deterministic_algorithms called without deterministic: true")
    monkeypatch.setattr(torch, "use_deterministic_algorithms", refuse)
    before = torch.get_num_threads()
    assert run_main(tmp_path, "--config", QUICK) == 0
    assert torch.get_num_threads() == before  # the run's thread count is restored


# -- the runner's own writes and the shared output folder (issue 11) ---------------------
def test_a_failed_write_leaves_no_temp_and_never_follows_a_planted_link(tmp_path, monkeypatch):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / f".index.html.tmp{os.getpid()}").symlink_to(outside)  # the old, predictable name
    write_atomic(runs / "index.html", "new")
    assert outside.read_text() == "precious" and (runs / "index.html").read_text() == "new"

    def no_space(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(OSError):
        write_atomic(runs / "summary.json", "{}")
    with pytest.raises(OSError):
        save_atomic(runs / "loss.png", lambda p: p.write_bytes(b"png"))
    left = sorted(p.name for p in runs.iterdir())
    assert left == [f".index.html.tmp{os.getpid()}", "index.html"]  # no new temporaries


def test_the_index_skips_and_names_what_is_not_a_run(tmp_path, capsys):
    for name, text in (("list", "[1, 2]"), ("strings", '{"scenarios": "x"}'), ("garbage", "{")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(text)
    assert run_main(tmp_path, "--config", QUICK) == 0
    err = capsys.readouterr().err
    assert "index.html leaves out garbage, list, strings: not a run's files" in err
    assert (tmp_path / "index.html").read_text().count("/report.html") == 1


def test_a_lock_held_elsewhere_delays_the_index_only_so_long(tmp_path, monkeypatch, capsys):
    import fcntl

    from demos.lab.pages import index
    monkeypatch.setattr(index, "LOCK_WAIT_S", 0.3)
    with open(tmp_path / ".index.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's rebuild that never ends
        started = time.monotonic()
        assert run_main(tmp_path, "--config", QUICK) == 0
        assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "index.html not rebuilt (.index.lock held by another process for 0.3 s); the next " \
           "run rebuilds it" in err
    assert len(list(tmp_path.glob("*/summary.json"))) == 1


def test_a_scenario_that_raises_shows_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    def boom(cfg, ctx):
        raise RuntimeError("boom")
    patch_run(monkeypatch, "my_exp", boom)
    assert run_main(tmp_path, "--config", QUICK) == 1
    out, err = capsys.readouterr()
    assert re.search(r"ERROR RuntimeError: boom \(at \S*test_hardening.py:\d+ in boom\) "
                     r"\(details in run.log\)", out), out
    assert "Traceback" not in out + err
    assert "Traceback" in (only_run_dir(tmp_path) / "run.log").read_text()


def test_plots_ignore_a_plotting_backend_that_does_not_exist(tmp_path):
    code = ("import os, sys; os.environ['MPLBACKEND'] = 'nonexistent'\n"
            "from pathlib import Path; from demos.lab.pages import plots\n"
            "plots.line_plot(Path(sys.argv[1]), [0, 1], {'y': [1, 2]}, title='t', xlabel='x', "
            "ylabel='y')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.png")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "x.png").read_bytes().startswith(b"\x89PNG")


def test_a_signal_while_the_run_finishes_ends_it_as_interrupted(tmp_path, monkeypatch, capsys):
    from demos.lab.pages import report
    real, sent = report.write_report, []

    def write_then_signal(*args, **kwargs):
        path = real(*args, **kwargs)
        if not sent:  # as if `kill` came while the report was written (once)
            sent.append(os.kill(os.getpid(), signal.SIGTERM))
        return path
    monkeypatch.setattr(report, "write_report", write_then_signal)
    assert run_main(tmp_path, "--config", QUICK) == EXIT_INTERRUPTED
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "SIGTERM: stopping" in err
    assert summary(only_run_dir(tmp_path))["status"] == "interrupted"
    assert "INTERRUPTED: 1 of 1" in out and "PASSED: " not in out  # one ending
    index = (tmp_path / "index.html").read_text()  # rebuilt too: it had said PASSED
    assert "badge interrupted" in index and "badge passed" not in index


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_start_up_is_one_line_and_130(tmp_path, monkeypatch, capsys,
                                                               sig):
    def signalled(cfg, where):
        os.kill(os.getpid(), sig)
    monkeypatch.setitem(registry(), "custom_function",
                        dataclasses.replace(registry()["custom_function"], prepare=signalled))
    assert run_main(tmp_path, "--config", CONFIGS / "custom_function.yaml") == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == "interrupted before the run started"
    assert signal.getsignal(sig) is not signal.default_int_handler  # restored afterwards


def test_a_signal_while_the_run_folder_is_made_ends_in_an_interrupted_run(tmp_path,
                                                                         monkeypatch, capsys):
    from demos.lab.core import files
    real = files.make_run_dir

    def make_then_signal(output_dir, now):
        path = real(output_dir, now)
        os.kill(os.getpid(), signal.SIGTERM)
        return path
    monkeypatch.setattr(files, "make_run_dir", make_then_signal)
    assert run_main(tmp_path, "--config", QUICK) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert "Traceback" not in err and "before the run started" not in err
    s = summary(only_run_dir(tmp_path))
    assert s["status"] == "interrupted" and s["scenarios"] == []


def test_a_signal_just_after_the_run_says_so(tmp_path, monkeypatch, capsys):
    from demos.lab.runner.run import Run
    real = Run.execute

    def execute_then_signal(*args, **kwargs):
        code = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return code
    monkeypatch.setattr(Run, "execute", execute_then_signal)
    assert run_main(tmp_path, "--config", QUICK) == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == "interrupted after the run finished"
    assert summary(only_run_dir(tmp_path))["status"] == "passed"  # its files are whole


def test_an_output_folder_whose_name_is_not_utf8_works(tmp_path, capsys):
    folder = tmp_path / os.fsdecode(b"runs\xff")
    assert run_main(folder, "--config", QUICK) == 0
    run_dir = only_run_dir(folder)
    assert (run_dir / "report.html").is_file() and (folder / "index.html").is_file()
    assert summary(run_dir)["status"] == "passed"
    out, err = capsys.readouterr()
    assert "runs\\udcff" in out and "Traceback" not in err and "Logging error" not in err


# -- lenet, interrupted ----------------------------------------------------------------------
QUICK_LENET = ["--config", CONFIGS / "lenet.yaml", "--set", "scenarios.lenet.max_images=300",
               "--set", "scenarios.lenet.expect={}", "--set", "scenarios.lenet.epochs=3"]


class StopAfter:
    """A stop request that arrives after the training loop has looked `n` times (a Ctrl-C)."""

    def __init__(self, n: int):
        self.n, self.looked = n, 0

    @property
    def requested(self):
        self.looked += 1
        return "SIGINT" if self.looked > self.n else None


def test_an_interrupted_lenet_keeps_its_checks(tmp_path, monkeypatch):
    real = registry()["lenet"].run

    def interrupted_after_7_steps(cfg, ctx):
        ctx.stop = StopAfter(7)  # the runner's stop request, as if Ctrl-C came
        return real(cfg, ctx)
    patch_run(monkeypatch, "lenet", interrupted_after_7_steps)
    assert run_main(tmp_path, *QUICK_LENET) == EXIT_INTERRUPTED
    stopped = only_run_dir(tmp_path) / "lenet"
    e = entry(summary(stopped.parent), "lenet")
    assert e["status"] == "interrupted" and e["steps"] == 7
    assert e["error"] == "interrupted by SIGINT before step 7"
    assert e["metrics"] == {"parameters": 81194.0}
    assert [c["name"] for c in e["checks"] if c["passed"] is False] == []  # expect: not evaluated
    passed = [c["name"] for c in e["checks"] if c["passed"] is True]
    assert {"10 parameter tensors", "81,194 parameters", "one SGD step changes the weights",
            "loss stays finite"} <= set(passed)
    assert (stopped / "metrics.csv").is_file() and list(stopped.glob("*.pt")) == []


@pytest.fixture
def tiny_disk(tmp_path):
    """A 300 KiB file system (tmpfs), where the run fills the disk halfway through."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(folder)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): "
                    + mounted.stderr.decode(errors="replace").strip())
    yield folder
    subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_full_disk_loses_no_result_and_leaves_no_temp_file(tiny_disk, capsys):
    assert run_main(tiny_disk / "out", "--config", CONFIGS / "all.yaml", "--dry-run",
                    *NO_SUPPORT) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "Logging error" not in err
    run_dir = only_run_dir(tiny_disk / "out")
    data = summary(run_dir)  # whole, and with every entry
    assert data["status"] == "failed" and len(data["scenarios"]) == len(
        [s for s in registry().values() if not s.data_parallel])
    full = [e for e in data["scenarios"] if e["status"] == "error"]
    assert full and all("No space left on device" in e["error"] for e in full)
    assert all(e["checks"] for e in data["scenarios"])  # their results are still reported
    assert [p for p in tiny_disk.rglob("*") if p.name.startswith(".") and "tmp" in p.name] == []


@contextlib.contextmanager
def file_size_limit(size: int):
    """`ulimit -f`, in this process, for the `with` block: a file written past `size` bytes
    fails (EFBIG; Python ignores SIGXFSZ)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_summary_json_is_whole_under_a_file_size_limit(tmp_path, monkeypatch, capsys):
    """ulimit -f (issue 44: 12 KiB, a two-entry run): the padded summary never fits, nor the
    final one indented (about 4.9 KB here); the compact one (3.4 KB) does, and is there from
    the run's start to its end."""
    from demos.lab.pages import artifacts

    monkeypatch.setattr(artifacts, "pool", lambda: None)  # drawn here, under the limit alone
    config = tmp_path / "two.yaml"
    config.write_text("scenarios:\n- {scenario: my_exp, support: []}\n"
                      "- {scenario: my_exp, id: again, support: []}\n")
    with file_size_limit(4 << 10):
        code = run_main(tmp_path / "out", "--config", config)
    text = (only_run_dir(tmp_path / "out") / "summary.json").read_text()
    data = json.loads(text)  # whole, final, with both entries
    assert [e["id"] for e in data["scenarios"]] == ["my_exp", "again"] and "pid" not in data
    assert all(e["checks"] for e in data["scenarios"]) and "\n" not in text.strip()
    assert code == EXIT_CODES[data["status"]] != 0  # its graphs did not fit either
    assert "could not write summary.json" not in capsys.readouterr().err


def test_a_run_that_cannot_write_its_summary_says_so_and_exits_1(tmp_path, monkeypatch,
                                                                 capsys):
    from demos.lab.runner import outputs

    def no_room(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(outputs, "write_atomic", no_room)
    assert run_main(tmp_path, "--config", QUICK) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not write summary.json: [Errno 28] No space left " \
        "on device; the run stops" in err, err
    run_dir = only_run_dir(tmp_path)
    assert not (run_dir / "summary.json").exists() and not (run_dir / "my_exp").exists()
    assert (run_dir / "run.log").read_text().splitlines()[-1].endswith(err.strip()[9:])


def test_run_log_says_why_it_stops(tmp_path):
    """A log that reaches the file size limit (or a full disk) ends with a line saying so,
    within the room it had."""
    from demos.lab.core.console import open_log

    log, close = open_log(tmp_path)
    with file_size_limit(2000):
        for i in range(100):
            log.debug("line %d %s", i, "x" * 50)
        close()
    text = (tmp_path / "run.log").read_text()
    assert len(text) <= 2000 and text.endswith(
        "run.log stops here: File too large; the console has the rest\n")
    assert all(line.endswith("x" * 50) for line in text.splitlines()[:-1])


def test_the_index_survives_what_other_folders_hold(tmp_path, capsys):
    """A name that is not UTF-8, a FIFO for a summary, a run killed before its final summary."""
    odd = tmp_path / os.fsdecode(b"caf\xe9")
    odd.mkdir()
    (odd / "summary.json").write_text(json.dumps(a_summary()))
    (odd / "report.html").write_text("<html></html>")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "summary.json")  # reading it would block for ever
    killed = tmp_path / "2026-01-01_00-00-00"
    killed.mkdir()
    (killed / "summary.json").write_text(json.dumps(a_summary(
        status="running", pid=2**22 + 12345, host=socket.gethostname())) + " " * 100)
    assert run_main(tmp_path, "--config", QUICK) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "leaves out fifo" in err
    index = (tmp_path / "index.html").read_text()
    assert "caf%E9/report.html" in index
    assert '<span class="badge stopped">STOPPED</span>' in index


def test_files_get_the_usual_permissions(dry_run):
    mask = os.umask(0)
    os.umask(mask)
    expected = oct(0o666 & ~mask)
    for name in ("summary.json", "report.html", "legendre_fit/loss.png",
                 "lenet/accuracy.png", "legendre_fit/fit.gif"):
        assert oct((dry_run.dir / name).stat().st_mode & 0o777) == expected, name


def test_a_signal_during_start_up_waits_for_a_safe_point(tmp_path, monkeypatch, capsys):
    """A signal while torch loads is noted, not raised inside the import (which can leave it
    half-imported or swallow the interrupt); start-up stops at the next safe point."""
    from demos.lab.runner import device
    real, finished = device.resolve_device, []

    def resolve_signalled(spec):
        os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came in the middle of the import
        finished.append(True)
        return real(spec)
    monkeypatch.setattr(device, "resolve_device", resolve_signalled)
    assert run_main(tmp_path, "--config", QUICK) == EXIT_INTERRUPTED
    assert finished == [True]  # what was running ran to its end
    assert capsys.readouterr().err.strip() == "interrupted before the run started"
    assert list(tmp_path.iterdir()) == []


def test_an_entry_whose_folder_cannot_be_made_does_not_stop_the_run(tmp_path, monkeypatch):
    import errno
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self.name == "my_exp":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_mkdir(self, *args, **kwargs)
    monkeypatch.setattr(Path, "mkdir", mkdir)
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--dry-run",
                    "--only", "my_exp,autograd_internals") == 1
    s = summary(only_run_dir(tmp_path))
    assert s["status"] == "failed"
    assert [(e["id"], e["status"]) for e in s["scenarios"]] == [
        ("autograd_internals", "passed"), ("my_exp", "error")]
    assert (only_run_dir(tmp_path) / "report.html").exists()


def test_a_plot_that_cannot_be_written_makes_its_entry_an_error(tmp_path, monkeypatch):
    """Plots are drawn beside the run; one the disk has no room for fails its entry."""
    import errno

    from demos.lab.pages import artifacts, plots
    def no_room(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(artifacts, "pool", lambda: None)  # drawn here, where the patch holds
    monkeypatch.setattr(plots, "loss_curve", no_room)
    assert run_main(tmp_path, "--config", CONFIGS / "multiply_add.yaml", "--dry-run") == 1
    (e,) = summary(only_run_dir(tmp_path))["scenarios"]
    assert e["status"] == "error"
    assert e["error"] == ("could not write multiply_add/loss.png: OSError: [Errno 28] No space "
                          "left on device")
    assert all(c["passed"] is not False for c in e["checks"])  # its results are kept


def test_a_config_name_that_is_not_utf8_gives_strict_json(tmp_path):
    odd = tmp_path / os.fsdecode(b"cfg_\xff.yaml")
    odd.write_bytes((QUICK).read_bytes())
    assert run_main(tmp_path / "out", "--config", odd) == 0
    text = (only_run_dir(tmp_path / "out") / "summary.json").read_bytes().decode("utf-8")
    assert "\\udc" not in text and json.loads(text)["config"].endswith("cfg_?.yaml")


def test_the_index_keeps_working_whatever_the_siblings_hold(tmp_path):
    """Odd digits in a name, a pid no process has, absurdly deep JSON, a linked folder, a
    directory at an index temp name, a FIFO at the lock's name: skipped or said, never a
    crash."""
    from demos.lab.pages.index import write_index

    def folder(name, text):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(text)
    folder("x-x-x-x-x-\u00b2", json.dumps(a_summary()))
    folder("2026-01-01_00-00-01", json.dumps(a_summary(status="running", pid=2**35,
                                                       host=socket.gethostname())))
    folder("2026-01-01_00-00-02", json.dumps(a_summary(status="running", pid=10**20)))
    folder("deep", "[" * 200_000)
    outside = tmp_path.parent / (tmp_path.name + "-elsewhere")
    outside.mkdir(exist_ok=True)
    (outside / "summary.json").write_text(json.dumps(a_summary()))
    (tmp_path / "2030-01-01_00-00-00").symlink_to(outside)
    (tmp_path / ".index.html.zz.tmp").mkdir()
    assert write_index(tmp_path) == ["2026-01-01_00-00-02", "deep"]  # no run has such a pid
    index = (tmp_path / "index.html").read_text()
    assert "x-x-x-x-x-\u00b2" in index and "2030-01-01" not in index
    assert "badge running" in index  # a pid beyond any process's: cannot tell, not stopped
    (tmp_path / ".index.lock").unlink()
    os.mkfifo(tmp_path / ".index.lock")
    with pytest.raises(OSError, match="not a regular file; remove it"):
        write_index(tmp_path)


def test_a_run_is_alive_only_as_the_same_process_in_the_same_namespace(tmp_path):
    """A running run's liveness is its process identity (issue 44): its PID with its start, in
    its PID namespace, on this boot. A run killed as PID 1 of a container showed RUNNING for
    ever beside the host's live PID 1; a reused PID counted as the run."""
    from demos.lab.core.files import INIT_PID_NS, identity
    from demos.lab.pages.index import write_index

    me = identity()
    if me is None:
        pytest.skip("no /proc here: a run is its PID alone")
    runs = {  # name: (pid, its identity), and what the index says
        "2026-01-01_00-00-01": (os.getpid(), me, "running"),  # this very process
        "2026-01-01_00-00-02": (os.getpid(), dataclasses.replace(me, start=me.start + 1),
                                "stopped"),  # the PID reused
        "2026-01-01_00-00-03": (os.getpid(), dataclasses.replace(me, boot="x"), "stopped"),
        "2026-01-01_00-00-04": (1, dataclasses.replace(me, ns="pid:[1]"),  # a container gone
                                "stopped" if me.ns == INIT_PID_NS else "running")}
    for name, (pid, process, _) in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(a_summary(
            status="running", pid=pid, host=socket.gethostname(),
            process=dataclasses.asdict(process))))
        (tmp_path / name / ".summary.json.abcd_123.tmp").write_text("{")
    assert write_index(tmp_path) == []
    index = (tmp_path / "index.html").read_text()
    for name, (*_, status) in runs.items():
        row = index[index.index(name):]
        assert row[:row.index("</tr>")].count(f"badge {status}") == 1, (name, status)
        assert (tmp_path / name / ".summary.json.abcd_123.tmp").exists() == (status == "running")


@pytest.mark.slow
def test_a_run_that_died_as_a_containers_first_process_is_stopped(tmp_path):
    """The issue's case itself: a run that is PID 1 of its own PID namespace (a container's
    main process) dies outright; the host's index says stopped and removes its temp files,
    though the host's PID 1 lives."""
    import shutil

    from demos.lab.core.files import INIT_PID_NS, identity
    from demos.lab.pages.index import write_index

    me = identity()
    if me is None or me.ns != INIT_PID_NS or os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root, unshare and the machine's own PID namespace")
    (tmp_path / "dies.py").write_text(
        "import os\nimport torch\n\n\nclass Dies(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        os._exit(9)  # no process survives"
        "\n\n    @staticmethod\n    def backward(ctx, g):\n        return g\n")
    (tmp_path / "c.yaml").write_text("scenarios:\n- {scenario: custom_function, function: "
                                     "dies.py:Dies, inputs: [{shape: [2]}], support: []}\n")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                           str(ROOT / "runner.py"), "--config", str(tmp_path / "c.yaml"),
                           "--output-dir", str(tmp_path / "out")], cwd=ROOT, timeout=120,
                          capture_output=True, text=True)
    assert done.returncode == 9, done.stdout + done.stderr
    run_dir = only_run_dir(tmp_path / "out")
    data = summary(run_dir)
    assert data["status"] == "running" and data["pid"] == 1 and data["process"]["ns"] != me.ns
    (run_dir / ".report.html.abcd_123.tmp").write_text("<")  # as a killed writer leaves it
    assert write_index(tmp_path / "out") == []
    assert '<span class="badge stopped">STOPPED</span>' in (tmp_path / "out" / "index.html"
                                                             ).read_text()
    assert not (run_dir / ".report.html.abcd_123.tmp").exists()


def test_watch_ends_at_once_where_no_run_folder_can_be_made(tmp_path, monkeypatch, capsys):
    """Issue 44: --watch on an output folder it cannot write waited for an edit of the config
    for ever; no edit mends that: one line, exit 2."""
    from demos.lab.runner import watch

    def waits(stamps):
        raise AssertionError("it waits for an edit that cannot help")
    monkeypatch.setattr(watch, "wait_for_change", waits)
    (tmp_path / "a_file").write_text("")
    assert run_main(tmp_path / "a_file" / "out", "--config", QUICK, "--watch") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: --output-dir {tmp_path / 'a_file' / 'out'}: cannot create the run folder: "), err


def test_group_signals_leave_the_helper_and_the_resource_tracker_alone(tmp_path):
    """SIGTERM and SIGHUP to the whole process group (timeout, a closed terminal) must not
    kill the drawing helper or multiprocessing's resource tracker (whose death prints
    tracebacks): both ignore them from the start; the main process blocks them for no
    longer than the starts."""
    code = """if 1:
        import signal
        from multiprocessing import resource_tracker
        from demos.lab.pages import artifacts
        def masked(pid, which):
            mask = [int(l.split()[1], 16) for l in open(f"/proc/{pid}/status")
                    if l.startswith(which + ":")][0]
            return [s.name for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                    if mask >> (s - 1) & 1]
        pool = artifacts.pool()
        pool.submit(artifacts.warm_up).result()
        tracker, helper = resource_tracker._resource_tracker._pid, next(iter(pool._processes))
        print(masked(tracker, "SigIgn"), masked(tracker, "SigBlk"))
        print(masked(helper, "SigIgn"), masked(helper, "SigBlk"))
        print(masked("self", "SigBlk"), signal.pthread_sigmask(signal.SIG_BLOCK, []))
        artifacts.shutdown()
    """
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    tracker, helper, main = proc.stdout.splitlines()
    assert tracker == "['SIGINT', 'SIGTERM', 'SIGHUP'] ['SIGHUP']"
    assert helper == "['SIGINT', 'SIGTERM', 'SIGHUP'] []"
    assert main == "[] set()"


def test_a_signal_while_a_helper_starts_arrives_afterwards():
    """The helper and the tracker start with the group's signals held back, not only
    ignored: a SIGTERM sent to the runner meanwhile is handled once the start is done, not
    lost (it was, and a run told to stop as its helper started went on to the end). In a
    process of its own: the runner starts them before it has a second thread (one that does
    not block the signal would take it, and ignore it)."""
    code = """if 1:
        import os, signal
        from demos.lab.core.signals import held, signal_handler
        got = []
        with signal_handler(lambda sig, frame: got.append(sig), (signal.SIGTERM,)):
            with held((signal.SIGTERM,)):
                os.kill(os.getpid(), signal.SIGTERM)
                print(got, end=" ")
        print(got)
    """
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == f"[] [{int(signal.SIGTERM)}]", proc.stderr


@pytest.mark.parametrize("sets, words", [
    (["scenarios.my_relu.N=1000000", "scenarios.my_relu.D_in=1", "scenarios.my_relu.H=1",
      "scenarios.my_relu.D_out=100"], "scenarios[1]: a training step would hold 305,000,202"),
    (["scenarios.linear_function.N=10000000", "scenarios.linear_function.in_features=100000",
      "scenarios.linear_function.out_features=100000"],
     "scenarios[7]: a training step would hold"),
    (["scenarios.lenet.dataset=synthetic", "scenarios.lenet.synthetic_size=300000"],
     "scenarios[3].synthetic_size: must be <= 100000"),
])
def test_sizes_that_would_exhaust_memory_are_config_errors(tmp_path, capsys, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, *args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_lenet_draws_each_shuffle_when_its_epoch_starts_and_the_same_as_before():
    """One epoch's order in memory, not all of them; the same orders as drawing them all up
    front from the same generator; each epoch's order again as often as it is asked for."""
    from demos.scenarios.lenet import Shuffles
    train = torch.arange(100, 200)
    upfront = torch.Generator().manual_seed(3)
    expected = [train[torch.randperm(100, generator=upfront)] for _ in range(4)]
    lazy = Shuffles(train, torch.Generator().manual_seed(3))
    assert all(torch.equal(lazy(e), expected[e]) and torch.equal(lazy(e), expected[e])
               for e in range(4))
    with pytest.raises(ValueError, match="in order"):
        lazy(5)


def test_terminal_control_characters_are_shown_not_obeyed(tmp_path, capsys):
    import logging

    from demos.lab.core.console import ConsoleHandler
    stream = io.StringIO()
    handler = ConsoleHandler(stream)
    handler.emit(logging.LogRecord("x", logging.ERROR, "", 0, "boom \x1b[31mred\x07\tok", (),
                                   None))
    assert stream.getvalue() == "boom \\x1b[31mred\\x07\tok\n"
    code = run_main(tmp_path, "--config", CONFIGS / "all.yaml", *NO_SUPPORT, "--only", "a\x1b[31mb")
    assert code == 2
    assert "\x1b" not in capsys.readouterr().err


def test_an_environment_torch_refuses_is_one_line_and_exit_2(tmp_path):
    """TORCH_LOGS=nonsense makes `import torch` raise: the process boundary is the point."""
    proc = subprocess.run([sys.executable, str(ROOT / "runner.py"), "--config",
                           str(QUICK), "--output-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TORCH_LOGS": "nonsense"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    # said where torch was first imported: a scenario file of the config, or the run's start
    assert proc.stderr.startswith("error: ") and ("torch could not be imported: ValueError: "
                                                  "Invalid log settings: nonsense") in proc.stderr


def test_a_save_during_the_first_run_of_a_file_is_run_again(tmp_path):
    """Issue 36: a file first loaded by a run (the Function's file, a neighbour) had its stamp
    taken after the run, so a save made while the run went on became the baseline and was never
    run. Its content when loaded is what counts: saved since, it is a change at once."""
    import threading

    from demos.lab.core import user_code
    from demos.lab.core.signals import StopRequest
    from demos.lab.runner.watch import watch

    config = tmp_path / "c.yaml"
    config.write_text("scenarios: []\n")
    ops = tmp_path / "ops_saved_late.py"
    ops.write_text("X = 1\n")
    calls, stop = [], StopRequest()

    def once() -> int:
        calls.append(user_code.load_file(str(ops), "function").X)
        if len(calls) == 1:
            ops.write_text("X = 22\n")  # saved while the run goes on, after it read the file
            return 0
        stop.requested = "SIGINT"
        return EXIT_INTERRUPTED

    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(
        watch(str(config), tmp_path, once, lambda: None, stop)), daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert done == [EXIT_INTERRUPTED] and calls == [1, 22]
