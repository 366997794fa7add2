"""The command line: `python runner.py --config configs/all.yaml [options]`.

Generic: the scenarios come in from the caller (`demos.cli`), as a function returning the
registry. Imports nothing heavy until a run really starts: --help, --list, --print-config
and config errors answer without torch, matplotlib or the user's code. Exit codes: 0 all
passed, 1 a check failed or a scenario raised, 2 usage or config error, 130 interrupted.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable

from demos.lab.core import config as config_mod
from demos.lab.core.config import DEVICE_RE
from demos.lab.core.results import EXIT_INTERRUPTED, EXIT_USAGE
from demos.lab.core.scenario import Registry
from demos.lab.core.schema import MAX_INT, ConfigError, show
from demos.lab.core.signals import StartUp, StopRequest, signal_handler, stop_if_requested



class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise ConfigError(f"{message} (see --help)")


def parser(prog: str = "runner.py") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Run the autograd demos described by a YAML config.",
               epilog="example: python runner.py --config configs/legendre_fit.yaml --device cpu")
    p.add_argument("--config", metavar="PATH", help="the YAML config to run (see configs/)")
    p.add_argument("--device", metavar="DEV",
                   help="auto (cuda > mps > cpu) | cpu | cuda | cuda:N | mps; overrides the config")
    p.add_argument("--seed", metavar="N", type=int, help="seed; overrides the config")
    p.add_argument("--threads", metavar="N|auto",
                   help="CPU threads for torch; overrides the config (a sweep's --jobs sets it "
                        "for its points)")
    p.add_argument("--output-dir", metavar="DIR", default="outputs",
                   help="where run folders go (default: outputs)")
    p.add_argument("--only", metavar="ID[,ID...]", action="append",
                   help="run only these scenario entries (repeatable)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help="override a config value, e.g. seed=3 or scenarios.legendre_fit.lr=1e-5 "
                        "(repeatable; values are YAML)")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny sizes and step counts: every code path and artifact, in seconds")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--open", action="store_true",
                   help="open the run's report.html in a browser at the end (needs a display)")
    p.add_argument("--baseline", metavar="FILE",
                   help="compare the run's final metrics and params with this baseline: a "
                        "value out of tolerance is a failed check (exit 1); with --compare, "
                        "judge the runs by its tolerances and bands")
    p.add_argument("--save-baseline", metavar="FILE",
                   help="after the run, write its final metrics and params as a baseline "
                        "(YAML, to commit beside the config)")
    p.add_argument("--ensemble", metavar="all|NAME,...", nargs="?", const="all",
                   help="with --save-baseline: rerun the config under other kernel levels and "
                        "thread counts (one process each, --jobs at a time) and save each "
                        "value's measured band, so that the baseline holds on other machines")
    p.add_argument("--sweep", metavar="KEY=V1,V2,...", action="append",
                   help="run the config once per value (repeatable: every combination); keys "
                        "as in --set; one run folder per point inside a sweep folder, then "
                        "sweep.json and sweep.html")
    p.add_argument("--seeds", metavar="LIST",
                   help="short for --sweep seed=...: 0,1,2 or a range 0-4 (or both: 0-2,7)")
    p.add_argument("--jobs", metavar="N", type=int, default=1,
                   help="sweep points run at once, each in its own process with its share "
                        "of the cores (default 1)")
    p.add_argument("--shard", metavar="I/N",
                   help="run only every N-th point of the sweep, starting at point I (0 <= I "
                        "< N): one slice per machine or job; then --aggregate")
    p.add_argument("--aggregate", metavar="DIR",
                   help="build sweep.json and sweep.html from the run folders under DIR")
    p.add_argument("--run-name", metavar="NAME",
                   help="the run's (or the sweep's) folder name in --output-dir, instead of "
                        "the start time; it must not exist yet (for a shard it may)")
    p.add_argument("--compare", metavar="RUN", nargs="+",
                   help="compare run folders (the first is the reference): a table of what "
                        "differs beyond tolerance, and compare.html in --output-dir; exit 0 "
                        "when they agree, 1 when they differ")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config and exit")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return p


def list_scenarios(registry: Registry) -> str:
    width = max(map(len, registry))
    return "\n".join(f"{name:<{width}}  {s.about}" for name, s in registry.items())


def main(argv: list[str] | None, registry: Callable[[], Registry],
         prog: str = "runner.py", stop: StopRequest | None = None) -> int:
    """Run the command line `argv` over the scenarios of `registry()`; return the exit code.

    `stop` is the caller's, when it noted signals already (see demos.cli)."""
    argv = sys.argv[1:] if argv is None else argv
    code, stop = 0, stop or StopRequest()
    try:
        with signal_handler(StartUp(stop)):  # the run installs its own handler when it starts
            code = run(argv, registry, prog, stop)
            if stop.requested and code != EXIT_INTERRUPTED:  # came after the run's handler
                raise KeyboardInterrupt
        sys.stdout.flush()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside the run's own handler: start-up, or the end
        when = "after the run finished" if stop.run_began else "before the run started"
        print(f"\ninterrupted {when}", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader of our output went away (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def run(argv: list[str], get_registry: Callable[[], Registry], prog: str,
        stop: StopRequest) -> int:
    args = parser(prog).parse_args(argv)
    if args.list:
        print(list_scenarios(get_registry()))
        return 0
    check_combinations(args)
    if args.compare:
        from demos.lab.comparing.side_by_side import compare_runs
        code = compare_runs([Path(p) for p in args.compare], Path(args.output_dir),
                            args.baseline)
        index(Path(args.output_dir))
        return code
    if args.aggregate:
        from demos.lab.comparing.aggregate import aggregate
        return aggregate(Path(args.aggregate), get_registry(), command=[prog, *argv])
    if not args.config:
        raise ConfigError("--config PATH is required (or --list); e.g. --config configs/all.yaml")
    check_overrides(args)
    registry = get_registry()
    base = load_baseline(args)
    if args.ensemble is not None:
        from demos.lab.comparing.ensemble import run_ensemble
        code = run_ensemble(args, registry, Path(args.output_dir), stop)
        index(Path(args.output_dir))
        return code
    if args.sweep or args.seeds is not None:
        from demos.lab.comparing.sweep import run_sweep
        code = run_sweep(args, registry, Path(args.output_dir), stop, command=[prog, *argv])
        index(Path(args.output_dir))
        return code
    cfg = configured = config_mod.load(args.config, registry, args.sets)
    if args.device is not None:
        cfg.device = args.device
    if args.seed is not None:
        cfg.seed = args.seed
    if args.threads is not None:
        cfg.threads = "auto" if args.threads == "auto" else int(args.threads)
    if args.only:
        cfg = config_mod.select(cfg, ",".join(args.only), args.config)
    if args.dry_run:
        cfg = config_mod.shrink(cfg, registry)
    if args.print_config:
        print(config_mod.dump(cfg), end="")
        return 0

    from demos.lab.pages import drawing as artifacts

    from demos.lab.runner import torchrun as distributed
    world = distributed.from_env()  # under torchrun: which rank this process is
    stop.deferred = True  # until torch has loaded: a signal is noted, not raised
    if world.primary:
        artifacts.pool()  # the drawing helper starts now, beside torch's import
    try:
        from demos.lab.runner.device import resolve  # the heavy imports (torch) start here
        from demos.lab.runner.run import execute
    except Exception as e:  # e.g. TORCH_LOGS=nonsense: torch refuses its environment
        why = " ".join(str(e).split()[:40])  # one line; torch's messages run long
        raise ConfigError(f"torch could not be imported: {type(e).__name__}: {why} (check "
                          f"the TORCH_* environment variables)") from None

    try:
        device, note = resolve(cfg.device)
    except ConfigError as e:
        where = "--device" if args.device is not None else f"{args.config}: device"
        raise ConfigError(f"{where} {cfg.device}: {e}") from None
    finally:
        stop.deferred = False
    stop_if_requested(stop)  # a safe point: torch has loaded
    for i, entry in enumerate(cfg.scenarios):  # the run starts: now user code may load
        prepare = registry[entry.scenario].prepare
        if prepare is not None:
            try:
                prepare(entry, f"scenarios[{i}]")
            except ConfigError as e:
                raise ConfigError(f"{args.config}: {e}") from None
    if world.active:
        for i, entry in enumerate(cfg.scenarios):  # e.g. a global batch the ranks can share
            check = getattr(entry, "check_world", None)
            if registry[entry.scenario].data_parallel and check is not None:
                try:
                    check(world.size, f"scenarios[{i}]")
                except ConfigError as e:
                    raise ConfigError(f"{args.config}: {e}") from None
        world, device = distributed.join(world, device)
        if device.type == "cuda":
            note = f"{note}; under torchrun each rank takes the GPU of its local rank: {device}"
        if not world.primary:
            from demos.lab.runner.follower import follow
            try:
                return follow(cfg, registry, device, world, stop)
            finally:
                distributed.leave(world)
    if base is not None:
        from demos.lab.comparing.baseline import Comparison
        base = Comparison(args.baseline, base, configured.scenarios,
                          [e.id for e in cfg.scenarios], str(device))
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        return execute(cfg, registry, device, note, Path(args.output_dir), source=args.config,
                       command=[prog, *argv], progress=progress, dry_run=args.dry_run,
                       open_report=args.open, stop=stop, sets=args.sets, baseline=base,
                       save_baseline=args.save_baseline, run_name=args.run_name, world=world)
    finally:
        distributed.leave(world)


def load_baseline(args: argparse.Namespace):
    """--baseline's file, read and validated before any work; --save-baseline's path checked."""
    from demos.lab.comparing import baseline
    if args.save_baseline:
        baseline.check_writable(args.save_baseline, args.config)
    if not args.baseline:
        return None
    base = baseline.load(args.baseline)
    if base.dry_run != args.dry_run:
        made, now = (("a --dry-run", "a full run") if base.dry_run else
                     ("a full run", "a --dry-run"))
        raise ConfigError(f"--baseline {args.baseline}: saved from {made}, this is {now}; "
                          f"their values cannot agree")
    return base


def check_overrides(args: argparse.Namespace) -> None:
    """--device, --seed and --threads, before anything runs (a sweep passes them on)."""
    if args.device is not None and not DEVICE_RE.fullmatch(args.device):
        raise ConfigError(f"--device: must be auto, cpu, cuda, cuda:N or mps, "
                          f"got {show(args.device)}")
    if args.seed is not None and not 0 <= args.seed <= MAX_INT:
        raise ConfigError(f"--seed: must be from 0 to {MAX_INT:.0e}, got {args.seed}")
    if args.threads is not None and args.threads != "auto" and not (
            args.threads.isdigit() and 1 <= int(args.threads) <= 1024):
        raise ConfigError(f"--threads: must be auto or a number from 1 to 1024, got "
                          f"{show(args.threads)}")


# what each option is set to when given (for "X: not with Y")
GIVEN = {"--config": lambda a: a.config, "--set": lambda a: a.sets,
         "--device": lambda a: a.device is not None, "--seed": lambda a: a.seed is not None,
         "--threads": lambda a: a.threads is not None, "--only": lambda a: a.only,
         "--dry-run": lambda a: a.dry_run, "--baseline": lambda a: a.baseline is not None,
         "--save-baseline": lambda a: a.save_baseline is not None,
         "--ensemble": lambda a: a.ensemble is not None,
         "--sweep": lambda a: a.sweep, "--seeds": lambda a: a.seeds is not None,
         "--jobs": lambda a: a.jobs != 1, "--shard": lambda a: a.shard,
         "--run-name": lambda a: a.run_name is not None, "--open": lambda a: a.open,
         "--print-config": lambda a: a.print_config}


def check_combinations(args: argparse.Namespace) -> None:
    """Options that only make sense together, or never do: one line each."""
    sweeping = bool(args.sweep) or args.seeds is not None
    alone = [o for o, on in (("--compare", args.compare), ("--aggregate", args.aggregate))
             if on]
    others = alone[1:] + [o for o, given in GIVEN.items() if given(args)
                          if not (o == "--baseline" and args.compare)]  # its tolerances
    if alone and others:  # e.g. --compare A B --save-baseline F: nothing would be saved
        raise ConfigError(f"{alone[0]} stands alone: not with {others[0]}")
    for option in ("--baseline", "--save-baseline"):
        if getattr(args, option[2:].replace("-", "_")) == "":
            raise ConfigError(f"{option}: an empty path; name a file")
    if args.ensemble is not None:
        if not args.save_baseline:
            raise ConfigError("--ensemble: only with --save-baseline FILE (it measures the "
                              "baseline's bands)")
        for option in ("--sweep", "--seeds", "--shard", "--baseline", "--print-config",
                       "--open"):
            if GIVEN[option](args):
                raise ConfigError(f"--ensemble: not with {option}")
    for option, value in (("--jobs", args.jobs != 1), ("--shard", args.shard)):
        if value and not sweeping and not (option == "--jobs" and args.ensemble is not None):
            raise ConfigError(f"{option}: only for a sweep (--sweep or --seeds) or an "
                              f"ensemble")
    if not 1 <= args.jobs <= 256:
        raise ConfigError(f"--jobs: must be from 1 to 256, got {args.jobs}")
    if sweeping or alone or args.ensemble is not None:
        from demos.lab.runner.torchrun import from_env
        if from_env().active:
            what = "a sweep" if sweeping else alone[0] if alone else "--ensemble"
            raise ConfigError(f"{what}: not under torchrun; run it as one process")
    if sweeping:
        swept = [a.partition("=")[0].strip() for a in args.sweep or []]
        swept += ["seed"] if args.seeds is not None else []
        fixed = {a.partition("=")[0].strip(): f"--set {a}" for a in args.sets}
        fixed.update({k: f"--{k} {v}" for k, v in (("seed", args.seed), ("device", args.device),
                                                  ("threads", args.threads)) if v is not None})
        for key in swept:
            if key in fixed:
                raise ConfigError(f"--sweep {key}: also fixed by {fixed[key]}; sweep it or fix "
                                  f"it, not both")
        for option, value in (("--save-baseline", args.save_baseline),
                              ("--print-config", args.print_config), ("--open", args.open)):
            if value:
                raise ConfigError(f"{option}: not with a sweep")
    if args.run_name is not None:
        from demos.lab.comparing.sweep import NAME_RE
        if not NAME_RE.fullmatch(args.run_name):
            raise ConfigError(f"--run-name {show(args.run_name)}: must be a folder-safe name "
                              f"(letters, digits, _ . = , + -; at most 100)")


def index(output_dir: Path) -> None:
    """Rebuild outputs/index.html so that it lists a new sweep or comparison."""
    from demos.lab.pages.report import write_index
    try:
        write_index(output_dir)
    except Exception as e:  # a lock held too long, a folder it cannot read: not the work lost
        print(f"warning: index.html not rebuilt ({e}); the next run rebuilds it",
              file=sys.stderr)
