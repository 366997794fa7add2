"""Benchmark: the runner's training loop against the documents' bare loop; start-up; scale.

    python -m tests.bench                 # a few minutes on 2 CPU cores; make bench runs it
    python -m tests.bench --quick         # fewer repetitions, smaller scale table
    python -m tests.bench --device cuda --out bench.json

The runner's loop is the real scenario (demos/scenarios/<name>.py) run through the runner's
Context, timed by its own `train_s` (the loop alone). The bare loop is the document's code at
the same sizes. They run alternately, in the same process; the table gives the median time per
step over the repetitions and their ratio.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from demos.lab.core.files import dumps
from demos.lab.core.machine import auto_threads, available_cores
from demos.lab.pages.artifacts import Artifacts
from demos.lab.runner.context import Context, Shared
from demos.scenarios import registry
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.my_relu import MyReLU

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_THREADS = torch.get_num_threads()  # torch's own default (on 2 cores: 2)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_legendre(device: torch.device, steps: int, points: int = 2000) -> float:
    """Document 003's script as legendre_fit's file writes it (its `train`), with no lab
    around it (tests.bench_documents.Bare), timed like train_s; seconds."""
    from demos.scenarios import legendre_fit
    from tests.bench_documents import Bare

    cfg = legendre_fit.Config(scenario="legendre_fit", id="bare", steps=steps, points=points)
    start = time.perf_counter()
    legendre_fit.train(cfg, Bare(device))
    sync(device)
    return time.perf_counter() - start


def bare_my_relu(device: torch.device, steps: int, N=64, D_in=1000, H=100, D_out=10) -> float:
    """Document 004's two-layer net as my_relu's file writes it (its `data` and `train`), with
    no lab around it; seconds."""
    from demos.scenarios import my_relu
    from tests.bench_documents import Bare

    torch.manual_seed(0)
    cfg = my_relu.Config(scenario="my_relu", id="bare", steps=steps, N=N, D_in=D_in, H=H,
                         D_out=D_out)
    tensors = my_relu.data(cfg, Bare(device))
    start = time.perf_counter()
    my_relu.train(cfg, Bare(device), *tensors)
    sync(device)
    return time.perf_counter() - start


def runner_loop(name: str, device: torch.device, progress: bool, **params) -> tuple[float, int]:
    """Run scenario `name` through the runner's Context; its train_s and steps."""
    scenario = registry()[name]
    cfg = scenario.config(scenario=name, id=name, **params)
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()):
        log = logging.getLogger("bench")
        artifacts = Artifacts(lambda message: None)
        ctx = Context(cfg, Path(folder), log, Shared(device, progress=progress,
                                                     warn_once=lambda message: None,
                                                     artifacts=artifacts))
        torch.manual_seed(0)
        scenario.run(cfg, ctx)
        artifacts.wait()
    return ctx.train_s, ctx.steps_run


def overhead(name: str, bare, device: torch.device, steps: int, repeats: int) -> dict:
    """Per-step time of bare vs runner (bar off and on), paired: each repetition runs all three,
    in alternating order, and the ratio is the median of the repetitions' own ratios.

    Pairing cancels the slow swings of a shared machine's load, which are larger than the
    effect measured here.
    """
    times: dict[str, list[float]] = {"bare": [], "runner": [], "runner+bar": []}
    runs = {"bare": lambda: bare(device, steps),
            "runner": lambda: runner_loop(name, device, False, steps=steps)[0],
            "runner+bar": lambda: runner_loop(name, device, True, steps=steps)[0]}
    for key in runs:  # warm-up: first calls pay for lazy initialisation
        runs[key]()
    ratios: dict[str, list[float]] = {"runner": [], "runner+bar": []}
    for r in range(repeats):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        got = {key: runs[key]() / steps for key in order}
        for key, value in got.items():
            times[key].append(value)
        for key in ratios:
            ratios[key].append(got[key] / got["bare"])

    def spread(values):
        q = statistics.quantiles(values, n=4)
        return [round(q[0], 3), round(q[2], 3)]
    return {"scenario": name, "steps": steps, "repeats": repeats,
            "us_per_step": {k: round(statistics.median(v) * 1e6, 2) for k, v in times.items()},
            "ratio": round(statistics.median(ratios["runner"]), 4),
            "ratio_iqr": spread(ratios["runner"]),
            "ratio_with_bar": round(statistics.median(ratios["runner+bar"]), 4),
            "ratio_with_bar_iqr": spread(ratios["runner+bar"])}


def loops(device: torch.device, repeats: int) -> list[dict]:
    """my_relu's and legendre_fit's loops against their bare twins, the drawing helper drawing
    their graphs beside them (as in a run), at 1 thread and at torch's default thread count:
    `repeats` alternating repetitions each, the median of the paired ratios."""
    before, out = torch.get_num_threads(), []
    try:
        for threads in sorted({1, DEFAULT_THREADS}):
            torch.set_num_threads(threads)
            for name, bare, steps in (("my_relu", bare_my_relu, 500),
                                      ("legendre_fit", bare_legendre, 2000)):
                out.append({**overhead(name, bare, device, steps, repeats), "threads": threads})
    finally:
        torch.set_num_threads(before)
    return out


def print_loops(rows: list[dict]) -> None:
    print("\nthe runner's loop / the document's bare loop (median of the paired ratios, "
          "interquartile range), the drawing helper working beside it:")
    print("| scenario | threads | bare µs/step | runner µs/step | ratio |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['scenario']} | {r['threads']} | {r['us_per_step']['bare']} | "
              f"{r['us_per_step']['runner']} | {r['ratio']} ({r['ratio_iqr'][0]}-"
              f"{r['ratio_iqr'][1]}) |", flush=True)


def machinery(device: torch.device, steps: int = 20000, repeats: int = 9) -> dict:
    """The runner's own cost per step: ctx.steps + ctx.record around a near-empty step,
    against a bare loop with the same step. Short and repeatable, so precise."""
    cfg = registry()["legendre_fit"].config(scenario="legendre_fit", id="bench")
    one = torch.ones((), device=device)

    def bare() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            loss = one + 1  # noqa: F841  the same step as the runner's below
        sync(device)
        return time.perf_counter() - start

    def runner(progress: bool) -> float:
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()):
            ctx = Context(cfg, Path(folder), logging.getLogger("bench"),
                          Shared(device, progress=progress))
            for t in ctx.steps(steps):
                loss = one + 1
                ctx.record(t, loss=loss)
        return ctx.train_s

    runs = {"bare": bare, "runner": lambda: runner(False), "runner+bar": lambda: runner(True)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(repeats):
        for key in (list(runs) if r % 2 == 0 else list(reversed(runs))):
            times[key].append(runs[key]() / steps)
    best = {k: min(v) for k, v in times.items()}  # min: interference only ever adds time
    return {"added_us_per_step": round((best["runner"] - best["bare"]) * 1e6, 2),
            "added_us_per_step_with_bar": round((best["runner+bar"] - best["bare"]) * 1e6, 2)}


def timed_command(args: list[str], repeats: int) -> float:
    """Median wall time of a command (seconds)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(args, cwd=ROOT, capture_output=True)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def startup(repeats: int) -> dict:
    py = sys.executable
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as bad:
        bad.write("scenarios:\n  - scenario: legendre_fit\n    lr: -1\n")
    runner = [py, str(ROOT / "runner.py")]
    return {"python -c pass": timed_command([py, "-c", "pass"], repeats),
            "python -c 'import torch'": timed_command([py, "-c", "import torch"], repeats),
            "runner.py --help": timed_command(runner + ["--help"], repeats),
            "runner.py --list": timed_command(runner + ["--list"], repeats),
            "runner.py (config error)": timed_command(runner + ["--config", bad.name], repeats)}


def timed_pair(order: tuple[str, str], commands: dict[str, list[str]]) -> dict[str, float]:
    """Each command's wall time, run in `order`; a command that fails ends the bench."""
    wall = {}
    for which in order:
        start = time.perf_counter()
        proc = subprocess.run(commands[which], cwd=ROOT, capture_output=True)
        wall[which] = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(commands[which][1:3])} failed:\n"
                             f"{proc.stdout.decode()}{proc.stderr.decode()}")
    return wall


def all_yaml(device: str, repeats: int, import_torch_s: float) -> dict:
    """configs/all.yaml (every artifact and check on) against the documents' own work done bare
    in one process (tests/bench_documents.py), both at one thread, in alternating pairs: the
    median of the pairs' ratios. Also each run's share that is training (train_s) and import."""
    runs, phases = [], []
    for i in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            order = ("bare", "all") if i % 2 == 0 else ("all", "bare")
            wall = timed_pair(order, {
                "bare": [sys.executable, "-m", "tests.bench_documents"],
                "all": [sys.executable, str(ROOT / "runner.py"), "--config",
                        str(ROOT / "configs" / "all.yaml"), "--no-progress", "--device", device,
                        "--threads", "1", "--output-dir", out]})
            run_dir = next(Path(out).glob("*/summary.json")).parent
            data = json.loads((run_dir / "summary.json").read_text())
            phases.append(phases_of(run_dir / "run.log", wall["all"], data))
        train = sum(e["timing"]["train_s"] for e in data["scenarios"] if e["timing"])
        runs.append({"bare_s": round(wall["bare"], 2), "wall_s": round(wall["all"], 2),
                     "train_s": round(train, 2), "ratio": round(wall["all"] / wall["bare"], 3)})
    none = {"s": 0.0, "train_s": 0.0}  # a phase a run did not have (no wait, say)
    names = dict.fromkeys(name for p in phases for name in p)
    profile = {name: {k: round(statistics.median(p.get(name, none)[k] for p in phases), 3)
                      for k in none} for name in names}
    return {"import_torch_s": import_torch_s, "runs": runs, "phases": profile,
            "median_ratio": round(statistics.median(r["ratio"] for r in runs), 3)}


def single_run(repeats: int) -> dict:
    """`python runner.py legendre_fit` (its config, every check and artifact) against document
    003's own script bare (`python -m tests.bench_documents legendre`), at one thread, in
    alternating pairs: idle, then beside one busy core. The median of the pairs' ratios."""
    out: dict = {}
    for load in ("idle", "one busy core"):
        busy = busy_core() if load != "idle" else None
        runs = []
        try:
            for i in range(repeats):
                with tempfile.TemporaryDirectory() as folder:
                    wall = timed_pair(("bare", "run") if i % 2 == 0 else ("run", "bare"), {
                        "bare": [sys.executable, "-m", "tests.bench_documents", "legendre"],
                        "run": [sys.executable, str(ROOT / "runner.py"), "legendre_fit",
                                "--no-progress", "--threads", "1", "--output-dir", folder]})
                runs.append({"bare_s": round(wall["bare"], 2), "wall_s": round(wall["run"], 2),
                             "ratio": round(wall["run"] / wall["bare"], 3)})
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        out[load] = {"runs": runs,
                     "median_ratio": round(statistics.median(r["ratio"] for r in runs), 3)}
    return out


def print_single(s: dict) -> None:
    print("\npython runner.py legendre_fit / document 003's script bare "
          "(python -m tests.bench_documents legendre), 1 thread, alternating pairs:")
    print("| load | bare s | runner s | ratio |\n|---|---|---|---|")
    for load, r in s.items():
        for run in r["runs"]:
            print(f"| {load} | {run['bare_s']} | {run['wall_s']} | {run['ratio']} |")
    print("; ".join(f"{load}: median ratio {r['median_ratio']}" for load, r in s.items()),
          flush=True)


def phases_of(log: Path, wall: float, summary: dict) -> dict[str, dict[str, float]]:
    """Where a run's wall time went, from run.log's timestamps: start-up (the process to the
    run's first line: Python, torch, the config), each entry (its start to the next one's),
    and the end (to the process's: report, index, the drawing helper)."""
    import datetime as dt

    stamps = []
    for line in log.read_text(encoding="utf-8").splitlines():
        m = re.match(r"(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ +demos\."
                     r"(scenario\.\S+: start (?P<entry>\S+) |run: (?P<run>run |\w+: \d+ of))",
                     line)
        if m:
            when = dt.datetime.strptime(m["when"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            stamps.append((m["entry"] or {"run ": "(run)"}.get(m["run"], "(end)"), when))
    train = {e["id"]: e["timing"]["train_s"] if e["timing"] else 0.0
             for e in summary["scenarios"]}
    entries = stamps[1:]  # each entry's start, then the run's last line
    out = {name: {"s": end - start, "train_s": train.get(name, 0.0)}
           for (name, start), (_, end) in zip(entries, entries[1:])}
    out["start-up and end"] = {"s": wall - sum(v["s"] for v in out.values()), "train_s": 0.0}
    return out


def watch_rerun(repeats: int) -> dict:
    """Seconds from saving an edit of custom_function.yaml's Function file to the rerun's
    verdict line, under `runner.py --watch` (a copy of the config and its my_ops.py, edited
    back and forth: the mistake, then the right one); the first run's wall time beside it."""
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        (base / "examples").mkdir()
        shutil.copy(ROOT / "configs" / "custom_function.yaml", base)
        ops = base / "examples" / "my_ops.py"
        shutil.copy(ROOT / "configs" / "examples" / "my_ops.py", ops)
        log = base / "watch.log"
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(ROOT / "runner.py"), "--config",
                                 "custom_function.yaml", "--watch", "--no-progress"],
                                cwd=base, stdout=log.open("w"), stderr=subprocess.STDOUT)
        try:
            def verdicts() -> int:
                return log.read_text().count(" scenarios passed; ")

            def wait(n: int) -> None:
                while verdicts() < n:
                    if proc.poll() is not None:
                        raise SystemExit(f"--watch ended:\n{log.read_text()}")
                    time.sleep(0.005)

            wait(1)
            first = time.perf_counter() - start
            right = "grad_x = grad_output * 3 * w * x**2"
            wrong = "grad_x = grad_output * w * x**2"
            times = []
            for i in range(repeats):
                time.sleep(0.3)  # the watch is waiting again
                text = ops.read_text()
                ops.write_text(text.replace(right, wrong) if i % 2 == 0
                               else text.replace(wrong, right))
                saved = time.perf_counter()
                wait(i + 2)
                times.append(time.perf_counter() - saved)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
    return {"first_run_s": round(first, 2), "reruns_s": [round(t, 3) for t in times],
            "median_rerun_s": round(statistics.median(times), 3)}


def busy_core() -> subprocess.Popen:
    """Another process that keeps one core busy (as a second job on the machine would)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def contention(device: torch.device, repeats: int, epochs: int = 5) -> list[dict]:
    """lenet's train_s with 1 and 2 threads, idle and beside one busy core: median of repeats."""
    rows = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            times = {}
            for load in ("idle", "one busy core"):
                hog = busy_core() if load != "idle" else None
                try:
                    time.sleep(0.2 if hog else 0)
                    times[load] = statistics.median(
                        runner_loop("lenet", device, False, epochs=epochs)[0]
                        for _ in range(repeats))
                finally:
                    if hog:
                        hog.kill()
                        hog.wait()
            rows.append({"threads": threads, "idle_s": round(times["idle"], 3),
                         "busy_s": round(times["one busy core"], 3),
                         "ratio": round(times["one busy core"] / times["idle"], 2)})
    finally:
        torch.set_num_threads(before)
    return rows


def scale(device: torch.device, quick: bool) -> list[dict]:
    rows = []
    for N in ((64, 1024) if quick else (64, 256, 1024, 4096)):
        # the sum of squared errors grows with N: scale the step size down to keep SGD stable
        s, steps = runner_loop("my_relu", device, False, N=N, steps=500, lr=1e-6 * 64 / N)
        rows.append({"scenario": "my_relu", "N": N, "steps": steps, "train_s": round(s, 3)})
    for steps in ((500, 2000) if quick else (500, 2000, 8000)):
        s, _ = runner_loop("legendre_fit", device, False, steps=steps)
        rows.append({"scenario": "legendre_fit", "N": 2000, "steps": steps,
                     "train_s": round(s, 3)})
    return rows


def compiled(device: torch.device, steps: int) -> list[dict]:
    """torch.compile against eager for the two scenarios' losses: compile time, per step."""
    from demos.scenarios import legendre_fit, my_relu

    rows = []
    for name, fn, run_args in (
            ("legendre_fit", legendre_fit.sse, lambda: legendre_inputs(device)),
            ("my_relu", my_relu.sse, lambda: relu_inputs(device))):
        result = {"scenario": name}
        for label, f in (("eager", fn), ("compiled", torch.compile(fn))):
            args = run_args()
            start = time.perf_counter()
            f(*args).backward()
            sync(device)
            result[f"{label}_first_step_s"] = round(time.perf_counter() - start, 3)
            start = time.perf_counter()
            for _ in range(steps):
                f(*args).backward()
            sync(device)
            result[f"{label}_us_per_step"] = round((time.perf_counter() - start) / steps * 1e6, 1)
        saved = (result["eager_us_per_step"] - result["compiled_us_per_step"]) * 1e-6
        cost = result["compiled_first_step_s"] - result["eager_first_step_s"]
        result["break_even_steps"] = round(cost / saved) if saved > 0 else None
        result["helps"] = saved > 0
        rows.append(result)
    return rows


def legendre_inputs(device):

    x = torch.linspace(-math.pi, math.pi, 2000, device=device)
    return [x, torch.sin(x)] + [torch.tensor(v, device=device, requires_grad=True)
                                for v in (0., -1., 0., .3)] + [LegendrePolynomial3.apply]


def relu_inputs(device):

    g = torch.Generator().manual_seed(0)
    return [torch.randn(64, 1000, generator=g).to(device), torch.randn(64, 10, generator=g).to(
        device), torch.randn(1000, 100, generator=g).to(device).requires_grad_(),
            torch.randn(100, 10, generator=g).to(device).requires_grad_(), MyReLU.apply]


def check_times(repeats: int) -> list[dict]:
    """check_function, warm (after one call of each), on a Function of the documents' size
    and on real sizes ([64, 128]: fast mode), every support row but inductor: median wall
    seconds over `repeats` alternating calls, and the verdict."""
    from demos import check_function
    from tests.fixtures import edge_fns

    sys.path.insert(0, str(ROOT / "configs" / "examples"))
    from my_ops import MyCube, cube  # configs/examples/cube_ok.yaml's Function

    def x(*shape, low=None):
        t = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        return (t.abs() + low if low else t).requires_grad_()

    cases = {"MyCube x (5, 3), w (3,), b (3,); double_backward (cube_ok.yaml)":
             (MyCube, lambda: [x(5, 3), x(3, low=0.5), torch.tensor([0.1, 0.2, 0.3])], cube,
              True),
             "SiLU (5, 3)": (edge_fns.SiLU, lambda: [x(5, 3)], edge_fns.silu, False),
             "SiLU (64, 128)": (edge_fns.SiLU, lambda: [x(64, 128)], edge_fns.silu, False),
             "SiLU (64, 128), half its gradient (a diagnosis)":
             (edge_fns.SiLUHalf, lambda: [x(64, 128)], edge_fns.silu, False)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    verdicts = {}
    with tempfile.TemporaryDirectory() as out:
        for i in range(repeats + 1):
            for name, (fn, inputs, reference, double) in cases.items():
                start = time.perf_counter()
                r = check_function(fn, inputs(), reference, double_backward=double,
                                   output_dir=out, quiet=True)
                if i:  # the first of each: warm-up
                    times[name].append(time.perf_counter() - start)
                verdicts[name] = r.status
    return [{"case": k, "median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3),
             "verdict": verdicts[k]} for k, v in times.items()]


def print_checks(rows: list[dict]) -> None:
    print("\ncheck_function, warm (median and best of the repetitions)")
    print("| Function and inputs | median s | best s | verdict |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['median_s']} | {r['min_s']} | {r['verdict']} |", flush=True)


def grade_times(repeats: int) -> list[dict]:
    """demos.grade, warm (after one call of each), on each document exercise solved right and
    solved wrong (its backward's grad_output dropped: every gradient diagnosed): median wall
    seconds over `repeats` alternating calls, and the score."""
    import demos
    from tests.test_exercise import SOLUTIONS, TODO

    wrong = {name: body.replace("grad_output.t()", "torch.ones_like(grad_output).t()")
             .replace("grad_output", "torch.ones_like(grad_output)")
             for name, body in SOLUTIONS.items()}
    cases: dict[str, tuple[Path, Path]] = {}
    with tempfile.TemporaryDirectory() as out:
        for name in SOLUTIONS:
            folder = Path(out) / name
            demos.exercise(name, folder)
            text = (folder / "exercise.py").read_text()
            line = next(ln for ln in text.splitlines() if TODO in ln)
            indent = line[:len(line) - len(line.lstrip())]
            for how, body in (("right", SOLUTIONS[name]), ("wrong", wrong[name])):
                sub = folder / f"{how}.py"
                sub.write_text(text.replace(line, "\n".join(indent + b
                                                            for b in body.splitlines())))
                cases[f"{name}, {how}"] = (sub, folder / "grading.yaml")
        times: dict[str, list[float]] = {k: [] for k in cases}
        first, scores = {}, {}
        for i in range(repeats + 1):
            for case, (sub, grading) in cases.items():
                start = time.perf_counter()
                r = demos.grade(sub, grading=grading)
                took = time.perf_counter() - start
                if i:  # the first of each: warm-up (the process's first: torch's lazy imports)
                    times[case].append(took)
                else:
                    first[case] = took
                scores[case] = f"{r.score:g}/{r.max_score:g}, {r.cases} hidden cases"
    return [{"case": k, "median_s": round(statistics.median(v), 4), "max_s": round(max(v), 4),
             "first_s": round(first[k], 3), "score": scores[k]} for k, v in times.items()]


def print_grades(rows: list[dict]) -> None:
    print("\ndemos.grade, warm (median and slowest of the repetitions)")
    print("| exercise, submission | median s | slowest s | first call s | score |\n"
          "|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['median_s']} | {r['max_s']} | {r['first_s']} | "
              f"{r['score']} |", flush=True)


def machine(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return (f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
            f"torch {torch.__version__}, Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions, smaller tables")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow start)")
    p.add_argument("--out", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--only", choices=["whole-run", "single", "loops", "watch", "contention",
                                      "check", "grade"],
                   help="just the whole-run ratio, one scenario's run against its document's "
                        "script, the loops at 1 and the default threads, the --watch rerun, "
                        "the thread contention table, check_function at the documents' "
                        "size and at [64, 128], or demos.grade on the five document exercises")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    repeats = 7 if args.quick else 15
    results = {"machine": machine(device), "device": str(device)}
    print(f"machine: {results['machine']}", flush=True)
    if args.only:
        return only(args, device, results)
    threads = torch.get_num_threads()  # the loops as a run has them: threads: auto
    torch.set_num_threads(auto_threads(available_cores()))
    try:
        results["overhead"] = [overhead("legendre_fit", bare_legendre, device, 2000, repeats),
                               overhead("my_relu", bare_my_relu, device, 500, repeats)]
    finally:
        torch.set_num_threads(threads)
    print("\nrunner loop vs the document's bare loop: median per step, and the median of the "
          f"paired ratios (interquartile range) over {repeats} repetitions")
    print("| scenario | steps | bare µs/step | runner µs/step | runner / bare | with progress bar "
          "µs/step | runner+bar / bare |")
    print("|---|---|---|---|---|---|---|")
    for r in results["overhead"]:
        us = r["us_per_step"]
        print(f"| {r['scenario']} | {r['steps']} | {us['bare']} | {us['runner']} | {r['ratio']} "
              f"({r['ratio_iqr'][0]}-{r['ratio_iqr'][1]}) | {us['runner+bar']} | "
              f"{r['ratio_with_bar']} "
              f"({r['ratio_with_bar_iqr'][0]}-{r['ratio_with_bar_iqr'][1]}) |",
              flush=True)
    results["machinery"] = machinery(device)
    m = results["machinery"]
    print(f"\nthe runner's own cost (ctx.steps + ctx.record(loss=...) per step, best of 9): "
          f"{m['added_us_per_step']} µs per step, {m['added_us_per_step_with_bar']} µs with the "
          f"progress bar")
    for r in results["overhead"]:
        share = m["added_us_per_step"] / r["us_per_step"]["bare"] * 100
        share_bar = m["added_us_per_step_with_bar"] / r["us_per_step"]["bare"] * 100
        print(f"  = {share:.2f}% of a {r['scenario']} step ({share_bar:.2f}% with the bar)")
        r["machinery_share_percent"] = [round(share, 3), round(share_bar, 3)]
    results["startup_s"] = startup(3 if args.quick else 5)
    print("\nstart-up (median wall time, seconds)")
    for k, v in results["startup_s"].items():
        print(f"| {k} | {v} |")
    results["all_yaml"] = all_yaml(args.device, 3 if args.quick else 5,
                                   results["startup_s"]["python -c 'import torch'"])
    print_whole_run(results["all_yaml"])
    results["single"] = single_run(3 if args.quick else 5)
    print_single(results["single"])
    results["loops"] = loops(device, 3 if args.quick else 5)
    print_loops(results["loops"])
    results["watch"] = watch_rerun(5 if args.quick else 9)
    print_watch(results["watch"])
    results["check"] = check_times(5 if args.quick else 9)
    print_checks(results["check"])
    results["contention"] = contention(device, 3 if args.quick else 5)
    print("\nlenet (5 epochs) train_s, idle and beside one busy core (median)")
    print("| threads | idle s | one busy core s | ratio |\n|---|---|---|---|")
    for r in results["contention"]:
        print(f"| {r['threads']} | {r['idle_s']} | {r['busy_s']} | {r['ratio']} |", flush=True)
    results["scale"] = scale(device, args.quick)
    print("\nscale (runner's train_s)\n| scenario | N | steps | train_s |\n|---|---|---|---|")
    for r in results["scale"]:
        print(f"| {r['scenario']} | {r['N']} | {r['steps']} | {r['train_s']} |", flush=True)
    if not args.no_compile:
        results["compile"] = compiled(device, 300 if args.quick else 1000)
        print("\ntorch.compile vs eager (loss forward + backward)")
        print("| scenario | compile (first step) s | eager µs/step | compiled µs/step | "
              "pays back after |")
        print("|---|---|---|---|---|")
        for r in results["compile"]:
            pays = f"{r['break_even_steps']:,} steps" if r["helps"] else "never (slower)"
            print(f"| {r['scenario']} | {r['compiled_first_step_s']} | {r['eager_us_per_step']} | "
                  f"{r['compiled_us_per_step']} | {pays} |")
    if args.out:
        Path(args.out).write_text(dumps(results))
    return 0


def print_whole_run(w: dict) -> None:
    print("\nconfigs/all.yaml (every check and artifact) / the documents' own work bare in one "
          "process (python -m tests.bench_documents), 1 thread, alternating pairs:")
    print("| bare s | all.yaml s | all.yaml / bare | of which train_s |\n|---|---|---|---|")
    for r in w["runs"]:
        print(f"| {r['bare_s']} | {r['wall_s']} | {r['ratio']} | {r['train_s']} |")
    print(f"median ratio {w['median_ratio']} (import torch alone: {w['import_torch_s']} s)")
    print("\nwhere all.yaml's time goes (median over the runs, from run.log's timestamps):")
    print("| phase | s | of which train_s |\n|---|---|---|")
    for name, p in w["phases"].items():
        print(f"| {name} | {p['s']:.2f} | {p['train_s']:.2f} |")
    print("", flush=True)


def print_watch(w: dict) -> None:
    print(f"\n--watch on configs/custom_function.yaml (support matrix on): first run "
          f"{w['first_run_s']} s; from saving an edit of its Function file to the rerun's "
          f"verdict: median {w['median_rerun_s']} s ({', '.join(map(str, w['reruns_s']))})",
          flush=True)


def only(args, device: torch.device, results: dict) -> int:
    """--only whole-run | single | loops | watch | contention | check | grade: one table,
    quickly."""
    if args.only == "whole-run":
        results["all_yaml"] = all_yaml(args.device, 3 if args.quick else 5,
                                       timed_command([sys.executable, "-c", "import torch"], 5))
        print_whole_run(results["all_yaml"])
    elif args.only == "single":
        results["single"] = single_run(3 if args.quick else 5)
        print_single(results["single"])
    elif args.only == "loops":
        results["loops"] = loops(device, 3 if args.quick else 5)
        print_loops(results["loops"])
    elif args.only == "watch":
        results["watch"] = watch_rerun(5 if args.quick else 9)
        print_watch(results["watch"])
    elif args.only == "check":
        results["check"] = check_times(5 if args.quick else 9)
        print_checks(results["check"])
    elif args.only == "grade":
        results["grade"] = grade_times(5 if args.quick else 9)
        print_grades(results["grade"])
    else:
        results["contention"] = rows = contention(device, 3 if args.quick else 5)
        for r in rows:
            print(f"threads {r['threads']}: idle {r['idle_s']} s, beside a busy core "
                  f"{r['busy_s']} s, ratio {r['ratio']}")
    if args.out:
        Path(args.out).write_text(dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
