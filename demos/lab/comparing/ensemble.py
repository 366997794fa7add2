"""A baseline whose tolerances are measured: `--save-baseline FILE --ensemble` (the variants,
--jobs, Ctrl-C: demos/docs/baselines.md, "The ensemble's runs"; why: demos/docs/reproducible.md).
Torch-free. Each variant is its own process, an ordinary run of the runner, because the
variables it changes are read when the libraries load.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from demos.lab.comparing.baseline import save
from demos.lab.core import machine
from demos.lab.core.config import RunConfig
from demos.lab.core.console import say
from demos.lab.core.files import ENSEMBLE, make_named_dir, make_run_dir, write_json
from demos.lab.core.machine import auto_threads, available_cores
from demos.lab.core.results import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunSummary, read_summary
from demos.lab.core.schema import ConfigError, did_you_mean
from demos.lab.core.signals import StopRequest, signal_handler
from demos.lab.core.tolerance import KINDS, Band, as_float, measure, num

AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # what torch's AVX512 level needs


def variants() -> dict[str, tuple[dict[str, str], int | None]]:
    """Every variant this CPU can run: name -> (environment, threads; None: the config's).
    `native` first: the run as asked for, whose values the baseline keeps."""
    flags = machine.cpu_flags()
    x86 = "sse4_1" in flags
    avx2, avx512 = x86 and "avx2" in flags, x86 and AVX512 <= flags
    out: dict[str, tuple[dict[str, str], int | None]] = {
        "native": ({}, None), **{f"threads{threads}": ({}, threads) for threads in (2, 4, 8)}}
    if not x86:
        return out
    for level in ["default"] + (["avx2"] if avx512 else []):  # levels below the CPU's own
        for threads in (1, 2):
            out[f"aten-{level}" + (f"-threads{threads}" if threads > 1 else "")] = (
                {"ATEN_CPU_CAPABILITY": level}, threads)
    if avx512:
        out["onednn-avx2"] = ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, 1)
    out["onednn-sse41"] = ({"ONEDNN_MAX_CPU_ISA": "SSE41"}, 1)
    out["mkl-compatible"] = ({"MKL_CBWR": "COMPATIBLE"}, 1)
    if avx2:
        out["mkl-avx2"] = ({"MKL_CBWR": "AVX2"}, 1)
    if avx512:  # an AVX2 machine, every library at that level
        out["avx2-machine"] = ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                "MKL_CBWR": "AVX2"}, 2)
    out["sse-machine"] = ({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                           "MKL_CBWR": "COMPATIBLE"}, 1)
    return out


def choose(spec: str) -> dict[str, tuple[dict[str, str], int | None]]:
    """--ensemble's value: `all` (every variant this CPU can run) or names, comma-separated;
    `native` is always run."""
    known = variants()
    if spec.strip() == "all":
        return known
    names = [n.strip() for n in spec.split(",")]
    for name in names:
        if name not in known:
            raise ConfigError(f"--ensemble: no variant {name!r} on this CPU"
                              f"{did_you_mean(name, known)}")
    return {n: known[n] for n in ["native", *names] if n in known}


def describe(env: dict[str, str], threads: int | None) -> str:
    """'ATEN_CPU_CAPABILITY=avx2, 2 threads' (the config's threads when None)."""
    parts = [f"{k}={v}" for k, v in env.items()]
    parts.append("the config's threads" if threads is None else
                 f"{threads} thread{'' if threads == 1 else 's'}")
    return ", ".join(parts)


def run_ensemble(args: Any, cfg: RunConfig, output_dir: Path, stop: StopRequest) -> int:
    """The whole ensemble: every variant, then the baseline with measured bands. `args`: the
    run's request (demos.lab.runner.options.RunRequest); `cfg`: its config, loaded."""
    chosen = choose(args.ensemble)
    cores = available_cores()
    jobs = min(args.jobs, cores)  # more at once would only slow each other down
    own = cfg.threads if isinstance(cfg.threads, int) else auto_threads(cores)
    folder = (make_named_dir(output_dir, args.run_name, kind="ensemble") if args.run_name else
              make_run_dir(output_dir, dt.datetime.now(), prefix="ensemble_"))
    say(f"ensemble {folder}: {len(chosen)} runs of {args.config} (native and "
        f"{len(chosen) - 1} variants), {min(jobs, len(chosen))} at a time")
    if jobs < args.jobs:
        say(f"warning: --jobs {args.jobs}: {cores} usable core{'s' * (cores > 1)} here; "
            f"running {jobs} run{'s' * (jobs > 1)} at a time", err=True)
    codes = run_variants(args, chosen, folder, stop, jobs, own)
    if stop.requested:
        say(f"ensemble interrupted: no baseline saved; the runs so far are in {folder}")
        return EXIT_INTERRUPTED
    runs = {n: s for n in chosen if (s := finished(folder / n))}
    if "native" not in runs:
        say(f"error: the native run did not finish: no baseline saved (see {folder}/native)")
        return EXIT_FAILED
    runs["native"].run_id = f"{folder.name}/native"
    values, bands = collect(runs)
    described = {n: describe(chosen[n][0], chosen[n][1] or
                              (runs[n].fingerprint or {}).get("threads")) for n in runs}
    write_ensemble_json(folder / ENSEMBLE, chosen, runs, values, bands)
    for line in table(runs["native"], values, bands):
        say(line)
    try:
        say(save(args.save_baseline, runs["native"], {e.id: e.scenario for e in cfg.scenarios},
                 bands, described))
    except OSError as e:
        say(f"error: could not save the baseline {args.save_baseline}: {e}")
        return EXIT_FAILED
    failed = [n for n in chosen if codes.get(n) != EXIT_OK]
    if failed:
        say(f"FAILED: {len(failed)} of {len(chosen)} runs did not pass: {', '.join(failed)} "
              f"(a check that fails under another kernel level or thread count does not hold "
              f"across machines)")
        return EXIT_FAILED
    say(f"PASSED: {len(chosen)} runs; ensemble in {folder}")
    return EXIT_OK


def command(args: Any, name: str, threads: int | None, folder: Path) -> list[str]:
    """A variant's command line: the run asked for, into the ensemble's folder, named for it."""
    out = [sys.executable, "-m", "demos", "--config", args.config, "--output-dir", str(folder),
           "--run-name", name, "--no-progress"]
    out += [a for s in args.sets for a in ("--set", str(s))]
    out += [f"{option}={value}" for option, value in (
        ("--device", args.device), ("--seed", args.seed), ("--threads", threads or args.threads))
        if value is not None]
    return out + [a for o in args.only or [] for a in ("--only", o)] + \
        ["--dry-run"] * args.dry_run


def run_variants(args: Any, chosen: dict[str, tuple[dict[str, str], int | None]],
                 folder: Path, stop: StopRequest, jobs: int, own: int) -> dict[str, int]:
    """Each variant in its own process, `jobs` at a time as long as their threads fit the
    cores (threads spinning on a busy core slow every run down many times); their exit codes
    by name. The first stop signal is passed on to the running ones (each stops at a step
    boundary and writes its summary) and starts no more; a second kills them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[3]), *filter(None, [os.environ.get("PYTHONPATH")])])}
    running: dict[str, tuple[subprocess.Popen, Any, float]] = {}
    codes: dict[str, int] = {}
    todo = list(chosen)

    def passed_on(signum: int, frame: Any) -> None:
        again = stop.requested is not None
        stop.requested = signal.Signals(signum).name
        say(f"\n{stop.requested}: " + ("killing the running runs" if again else
                                       "the running runs stop at their next step boundary; no "
                                       "new one starts (send it again to kill them)"), err=True)
        for proc, _, _ in running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL if again else signal.SIGINT)

    def fits(name: str) -> bool:
        busy = sum(chosen[n][1] or own for n in running)
        return not running or busy + (chosen[name][1] or own) <= available_cores()

    with signal_handler(passed_on):
        while running or (todo and not stop.requested):
            while todo and len(running) < jobs and not stop.requested and fits(todo[0]):
                name = todo.pop(0)
                out = tempfile.TemporaryFile()
                proc = subprocess.Popen(command(args, name, chosen[name][1], folder),
                                        env={**env, **chosen[name][0]}, stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, preexec_fn=stop_with_parent)
                running[name] = (proc, out, time.monotonic())
            for name, (proc, out, began) in list(running.items()):
                if proc.poll() is not None:
                    del running[name]
                    codes[name] = proc.returncode
                    report(name, proc.returncode, out, time.monotonic() - began, folder,
                           len(codes), len(chosen))
            time.sleep(0.05)
    for name in todo:
        say(f"not run (interrupted): {name}")
    return codes


def finished(folder: Path) -> RunSummary | None:
    """A variant's summary, where its run finished (passed or failed)."""
    try:
        s = read_summary(folder)
    except ConfigError:
        return None
    return s if s.status in ("passed", "failed") else None


def stop_with_parent() -> None:
    """In a variant's process, on Linux: SIGTERM when the ensemble dies, even by SIGKILL, so
    that no run trains on for nobody (it stops at a step boundary and writes its summary)."""
    if sys.platform.startswith("linux"):
        import ctypes
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def report(name: str, code: int, out: Any, seconds: float, folder: Path, done: int,
           total: int) -> None:
    """One line per finished run; the end of its output when it has no run to show for it."""
    s = finished(folder / name) if code in (0, 1, 130) else None
    status = s.status if s else f"no run (exit {code})"
    say(f"[{done}/{total}] {name}: {status.upper()} after {seconds:.1f} s")
    if s is None:
        out.seek(0)
        for line in out.read().decode("utf-8", "replace").strip().splitlines()[-3:]:
            say(f"    {line}")
    out.close()


def collect(runs: dict[str, RunSummary]) -> tuple[dict[str, dict[str, list[float]]],
                                                   dict[str, dict[str, Band]]]:
    """Each value of the entries over the runs (entries that passed or failed; every run runs
    the same entries), and its band where more than one run gave it: {entry:
    {'metrics.<name>': values}}, {entry: {key: Band}}."""
    values: dict[str, dict[str, list[float]]] = {}
    for s in runs.values():
        for e in s.scenarios:
            for kind in KINDS if e.status in ("passed", "failed") else ():
                for name, v in getattr(e, kind).items():
                    values.setdefault(e.id, {}).setdefault(f"{kind}.{name}", []).append(
                        as_float(v))
    bands = {entry: {key: band for key, xs in keys.items()
                     if len(xs) > 1 and (band := measure(xs)) is not None}
             for entry, keys in values.items()}
    return values, bands


def table(native: RunSummary, values: dict[str, dict[str, list[float]]],
          bands: dict[str, dict[str, Band]]) -> list[str]:
    """The values that moved across the ensemble, with what the band allows."""
    rows = [("entry", "value", "native", "min", "max", "n", "allowed")]
    ref = {e.id: e for e in native.scenarios}
    for entry, keys in bands.items():
        for key, b in keys.items():
            if b.min != b.max:
                kind, _, name = key.partition(".")
                allowed = f"x/ {b.ratio:.10g}" if b.ratio else f"+- {b.atol:.3g}"
                rows.append((entry, key, num(getattr(ref[entry], kind).get(name)), num(b.min),
                             num(b.max), str(b.n), allowed))
    same = sum(map(len, bands.values())) - (len(rows) - 1)  # the values that did not move
    if len(rows) == 1:
        return [f"every value came out the same in every run ({same} values)"]
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return ["values that moved across the ensemble (the other "
            f"{same} came out the same in every run):",
            *("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)]


def write_ensemble_json(path: Path, chosen: dict[str, tuple[dict[str, str], int | None]],
                        runs: dict[str, RunSummary], values: dict[str, dict[str, list[float]]],
                        bands: dict[str, dict[str, Band]]) -> None:
    """ensemble.json: each variant (what it changed, its fingerprint, its status) and each
    value's runs and band."""
    write_json(path, {
        "variants": {n: {"env": env, "threads": t,
                         "status": runs[n].status if n in runs else "did not finish",
                         "fingerprint": runs[n].fingerprint if n in runs else None}
                     for n, (env, t) in chosen.items()},
        "values": {entry: {key: {"runs": [x if math.isfinite(x) else None for x in xs],
                                 "band": asdict(bands[entry][key])
                                 if key in bands.get(entry, {}) else None}
                           for key, xs in keys.items()} for entry, keys in values.items()}})
