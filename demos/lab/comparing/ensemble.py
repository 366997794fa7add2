"""A baseline whose tolerances are measured: `--save-baseline FILE --ensemble`.

Torch-free. The config runs once as the user asked (`native`, the reference whose values the
baseline holds) and again, with the same seed, under variants that change what a different
machine would: torch's kernel level (ATEN_CPU_CAPABILITY), oneDNN's (ONEDNN_MAX_CPU_ISA), MKL's
code path (MKL_CBWR), and the thread count. Each variant is its own process (these variables
are read when the libraries load), a run folder inside one `ensemble_<time>` folder, started
like a sweep's points (`--jobs` at a time, Ctrl-C passed on). Each value's band is measured from
what the runs gave (demos.lab.core.tolerance.measure) and written into the baseline with the
evidence: n, min, max.

Only levels below the CPU's own can be emulated: save an ensemble on the most capable CPU at
hand.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from demos.lab.comparing.baseline import save
from demos.lab.core import config as config_mod
from demos.lab.core import fingerprint as fp
from demos.lab.core.console import say
from demos.lab.core.files import write_json
from demos.lab.core.layout import ENSEMBLE, SUMMARY, make_named_dir, make_run_dir, read_run
from demos.lab.core.results import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from demos.lab.core.scenario import Registry
from demos.lab.core.schema import ConfigError, did_you_mean
from demos.lab.core.signals import StopRequest
from demos.lab.core.threads import auto_threads, available_cores
from demos.lab.core.tolerance import KINDS, Band, measure, num

AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # what torch's AVX512 level needs


def variants() -> dict[str, tuple[dict[str, str], int | None]]:
    """Every variant this CPU can run: name -> (environment, threads; None: the config's).
    `native` first: the run as asked for, whose values the baseline keeps."""
    flags = fp.cpu_flags()
    x86 = "sse4_1" in flags
    avx2, avx512 = x86 and "avx2" in flags, x86 and AVX512 <= flags
    aten = ["default"] + (["avx2"] if avx512 else [])  # levels below the CPU's own
    out: dict[str, tuple[dict[str, str], int | None]] = {"native": ({}, None)}
    for threads in (2, 4, 8):
        out[f"threads{threads}"] = ({}, threads)
    if not x86:
        return out
    for level in aten:
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


def run_ensemble(args: Any, registry: Registry, output_dir: Path, stop: StopRequest) -> int:
    """The whole ensemble: every variant, then the baseline with measured bands."""
    from demos.lab.comparing.sweep import Plan, cap_jobs, passed_on, run_points

    cfg = config_mod.load(args.config, registry, args.sets)
    if args.only:
        cfg = config_mod.select(cfg, ",".join(args.only), args.config)
    chosen = choose(args.ensemble)
    jobs, note = cap_jobs(args.jobs, "run")  # as a sweep's: at most the usable cores
    plan = Plan(args.config, [("variant", list(chosen))], [(n, []) for n in chosen],
                passed_on(args), jobs=jobs)
    plan.extra = {n: ((["--threads", str(t)] if t else []), env)
                  for n, (env, t) in chosen.items()}
    own = cfg.threads if isinstance(cfg.threads, int) else auto_threads(available_cores())
    own = int(args.threads) if args.threads not in (None, "auto") else own
    plan.cores = {n: t or own for n, (_, t) in chosen.items()}  # never more threads than cores
    folder = (make_named_dir(output_dir, args.run_name, kind="ensemble") if args.run_name else
              make_run_dir(output_dir, dt.datetime.now(), prefix="ensemble_"))
    say(f"ensemble {folder}: {len(chosen)} runs of {args.config} (native and "
        f"{len(chosen) - 1} variants), {min(jobs, len(chosen))} at a time")
    if note:
        say(f"warning: {note}", err=True)
    codes, _ = run_points(plan, folder, stop)
    if stop.requested:
        say(f"ensemble interrupted: no baseline saved; the runs so far are in {folder}")
        return EXIT_INTERRUPTED
    runs = {n: s for n in chosen if (s := read_run(folder / n / SUMMARY))
            and s.get("status") in ("passed", "failed")}
    if "native" not in runs:
        say(f"error: the native run did not finish: no baseline saved (see {folder}/native)")
        return EXIT_FAILED
    runs["native"]["run_id"] = f"{folder.name}/native"
    values, bands = collect(runs)
    described = {n: describe(chosen[n][0], chosen[n][1] or
                              (runs[n].get("fingerprint") or {}).get("threads")) for n in runs}
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


def collect(runs: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, list[float]]],
                                                       dict[str, dict[str, Band]]]:
    """Each value of the native run's entries over the runs (entries that passed or failed),
    and its band: {entry: {'metrics.<name>': values}}, {entry: {key: Band}}."""
    values: dict[str, dict[str, list[float]]] = {}
    for s in runs.values():
        for e in s.get("scenarios", []):
            if e.get("status") not in ("passed", "failed"):
                continue
            for kind in KINDS:
                for name, v in (e.get(kind) or {}).items():
                    x = math.nan if v is None else float(v)
                    values.setdefault(e["id"], {}).setdefault(f"{kind}.{name}", []).append(x)
    native = {e["id"]: e for e in runs["native"].get("scenarios", [])}
    bands: dict[str, dict[str, Band]] = {}
    for entry, keys in values.items():
        if entry not in native:
            continue
        for key, xs in keys.items():
            band = measure(xs) if len(xs) > 1 else None
            if band is not None:
                bands.setdefault(entry, {})[key] = band
    return values, bands


def table(native: dict[str, Any], values: dict[str, dict[str, list[float]]],
          bands: dict[str, dict[str, Band]]) -> list[str]:
    """The values that moved across the ensemble, with what the band allows."""
    rows = [("entry", "value", "native", "min", "max", "n", "allowed")]
    ref = {e["id"]: e for e in native.get("scenarios", [])}
    same = 0
    for entry, keys in bands.items():
        for key, b in keys.items():
            if b.min == b.max:
                same += 1
                continue
            kind, _, name = key.partition(".")
            allowed = f"x/ {b.ratio:.10g}" if b.ratio else f"+- {b.atol:.3g}"
            rows.append((entry, key, num(ref[entry][kind].get(name)), num(b.min), num(b.max),
                         str(b.n), allowed))
    if len(rows) == 1:
        return [f"every value came out the same in every run ({same} values)"]
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return ["values that moved across the ensemble (the other "
            f"{same} came out the same in every run):",
            *("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)]


def write_ensemble_json(path: Path, chosen: dict[str, tuple[dict[str, str], int | None]],
                        runs: dict[str, dict[str, Any]], values: dict[str, dict[str, list[float]]],
                        bands: dict[str, dict[str, Band]]) -> None:
    """ensemble.json: each variant (what it changed, its fingerprint, its status) and each
    value's runs and band."""
    write_json(path, {
        "variants": {n: {"env": env, "threads": t, "status": (runs.get(n) or {}).get(
            "status", "did not finish"), "fingerprint": (runs.get(n) or {}).get("fingerprint")}
                     for n, (env, t) in chosen.items()},
        "values": {entry: {key: {"runs": [x if math.isfinite(x) else None for x in xs],
                                 "band": asdict(bands[entry][key])
                                 if key in bands.get(entry, {}) else None}
                           for key, xs in keys.items()} for entry, keys in values.items()}})
