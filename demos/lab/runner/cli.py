"""The command line: `python runner.py [run] --config configs/all.yaml [options]`, and the
commands sweep, aggregate and compare, each with its own options.

A command line that names no command is a run. Generic: the scenarios come in from the caller
(`demos.cli`), as a function returning the registry. Imports nothing heavy until a run really
starts: --help and --list answer without torch, matplotlib or the user's code. Exit codes: 0
all passed, 1 a check failed or a scenario raised, 2 usage or config error, 130 interrupted.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from demos.lab.core import config as config_mod
from demos.lab.core.console import say, silence
from demos.lab.core.layout import INDEX, check_output_dir
from demos.lab.core.results import EXIT_INTERRUPTED, EXIT_USAGE
from demos.lab.core.scenario import Registry, torch_refused
from demos.lab.core.schema import ConfigError, did_you_mean
from demos.lab.core.signals import StartUp, StopRequest, signal_handler, stop_if_requested
from demos.lab.runner.options import (
    RunRequest,
    check_overrides,
    check_path,
    check_run,
    check_sweep,
    load_baseline,
    one_process,
    parse,
)


@dataclass
class Call:
    """What a command gets besides its options."""
    registry: Callable[[], Registry]
    stop: StopRequest
    command: list[str]  # [prog, *argv] as typed, for the records
    config: Any = None  # the config's data, when it comes from memory: --config only names it
    keep: Callable[[Any], None] | None = None  # handed the Run or the comparison made (demos.run)


# The commands.

def run_command(args: RunRequest, call: Call) -> int:
    """`run`: the config once; or, with --ensemble, once per variant for a baseline's bands."""
    if args.list:
        say(list_scenarios(call.registry()))
        return 0
    check_run(args)
    if not args.config:
        raise ConfigError("--config PATH is required (or --list); e.g. --config configs/all.yaml")
    check_overrides(args)
    check_output_dir(args.output_dir)
    registry = call.registry()
    base = load_baseline(args.baseline, args.dry_run)
    if args.ensemble is not None:
        device_there(args, registry)
        from demos.lab.comparing.ensemble import run_ensemble
        code = run_ensemble(args, registry, Path(args.output_dir), call.stop)
        index(Path(args.output_dir))
        return code
    if args.watch:
        from demos.lab.runner.watch import watch
        made: list[Any] = []  # the newest run alone: an older one holds the user's old code

        def keep(run: Any) -> None:
            made[:] = [run]

        call = dataclasses.replace(call, keep=keep)
        return watch(args.config, Path(args.output_dir),  # the baseline read anew each time
                     lambda: run_once(args, registry, load_baseline(args.baseline,
                                                                    args.dry_run), call),
                     lambda: Path(made[-1].dir) if made else None, call.stop,
                     also=(args.baseline,) if args.baseline else ())
    return run_once(args, registry, base, call)


def run_once(args: RunRequest, registry: Registry, base: Any, call: Call) -> int:
    """The config, loaded now (again, under --watch), and run once."""
    cfg = configured = (config_mod.load(args.config, registry, args.sets) if call.config is None
                        else config_mod.load_data(call.config, args.config, registry, args.sets))
    if args.device is not None:
        cfg.device = args.device
    if args.seed is not None:
        cfg.seed = args.seed
    if args.threads is not None:
        cfg.threads = "auto" if args.threads == "auto" else int(args.threads)
    kept = config_mod.explicit(cfg, args.sets)  # --dry-run keeps what --set gave
    if args.only:
        cfg = config_mod.select(cfg, ",".join(args.only), args.config)
    if args.dry_run:
        cfg = config_mod.shrink(cfg, registry, kept)
    if args.print_config:
        say(config_mod.dump(cfg).removesuffix("\n"))
        return 0
    return start(args, cfg, configured, registry, base, call)


def sweep_command(args: argparse.Namespace, call: Call) -> int:
    """`sweep`: the config once per point, each an ordinary run in its own process; then
    sweep.json and sweep.html."""
    if not args.sweep and args.seeds is None:
        raise ConfigError("sweep: what to sweep? --seeds LIST, --sweep KEY=V1,V2,... or both")
    check_sweep(args)
    check_overrides(args)
    check_output_dir(args.output_dir)
    registry = call.registry()
    load_baseline(args.baseline, args.dry_run)
    device_there(args, registry)
    from demos.lab.comparing.sweep import run_sweep
    code = run_sweep(args, registry, Path(args.output_dir), call.stop, command=call.command)
    index(Path(args.output_dir))
    return code


def aggregate_command(args: argparse.Namespace, call: Call) -> int:
    """`aggregate DIR`: sweep.json and sweep.html from the run folders under DIR."""
    one_process("aggregate")
    from demos.lab.comparing.aggregate import aggregate
    folder = Path(args.dir)
    try:
        return aggregate(folder, call.registry(), command=call.command)
    finally:  # the index beside the sweep shows its new verdict, or none once it was removed
        if folder.is_dir() and (folder.parent / INDEX).is_file():
            index(folder.parent)


def compare_command(args: argparse.Namespace, call: Call) -> int:
    """`compare RUN_A RUN_B ...`: what differs beyond tolerance; exit 0 when they agree."""
    check_path("--baseline", args.baseline)
    check_output_dir(args.output_dir)
    one_process("compare")
    from demos.lab.comparing.side_by_side import compare_runs
    code = compare_runs([Path(p) for p in args.runs], Path(args.output_dir), args.baseline,
                        call.keep)
    index(Path(args.output_dir))
    return code


def device_there(args: RunRequest | argparse.Namespace, registry: Registry) -> None:
    """A sweep's or an ensemble's device, before any point starts: a device this machine does
    not have is one line, exit 2, as for a run (auto and cpu always are; torch loads only to
    check another)."""
    spec = args.device
    if spec is None:
        spec = config_mod.load(args.config, registry, args.sets).device
    if spec in ("auto", "cpu"):
        return
    from demos.lab.runner.device import resolve_device
    try:
        resolve_device(spec)
    except ConfigError as e:
        where = "--device" if args.device is not None else f"{args.config}: device"
        raise ConfigError(f"{where} {spec}: {e}") from None


COMMANDS: dict[str, Callable[[Any, Call], int]] = {
    "run": run_command, "sweep": sweep_command, "aggregate": aggregate_command,
    "compare": compare_command}  # their options: demos.lab.runner.options.COMMANDS


def list_scenarios(registry: Registry) -> str:
    """A line per scenario; read from the files where the registry can (nothing imported)."""
    about = getattr(registry, "about", lambda name: registry[name].about)
    width = max(map(len, registry))
    return "\n".join(f"{name:<{width}}  {about(name)}" for name in registry)


def main(argv: list[str] | None, registry: Callable[[], Registry],
         prog: str = "runner.py", stop: StopRequest | None = None, config: Any = None,
         typed: list[str] | None = None) -> int:
    """Run the command line `argv` over the scenarios of `registry()`; return the exit code.

    `stop` is the caller's, when it noted signals already (see demos.cli). `config`: the
    config's data, for a run whose config is made in memory (its --config names it in
    messages; see demos.scenario_api.run_alone); `typed`: the command line to record, where it
    is not `argv`."""
    argv = sys.argv[1:] if argv is None else argv
    code, stop = 0, stop or StopRequest()
    try:
        with signal_handler(StartUp(stop), stop.signals):
            args = parse(by_name(argv, registry), prog)
        request = RunRequest.of(args) if args.command == "run" else args
        code = perform(COMMANDS[args.command], request,
                       Call(registry, stop, [prog, *(argv if typed is None else typed)], config))
        try:
            sys.stdout.flush()
        except (OSError, ValueError) as e:  # a reader gone away (| head), a full disk
            silence(sys.stdout, e)
    except ConfigError as e:
        say(f"error: {e}", err=True)
        code = EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside the run's own handler: start-up, or the end
        say(f"\ninterrupted {interrupted_when(stop)}", err=True)
        code = EXIT_INTERRUPTED
    except BrokenPipeError as e:  # a print of ours while the reader went away (| head)
        silence(sys.stdout, e)
    return code


def perform(command: Callable[[Any, Call], int], request: Any, call: Call) -> int:
    """`command` (of COMMANDS) on its request: the command line's, or one the Python API
    built; its exit code. Raises ConfigError (a usage or config error: nothing ran) and
    KeyboardInterrupt (a signal outside the run's own handler), for main to say, or for
    demos.run to raise in its caller."""
    stop = call.stop
    with signal_handler(StartUp(stop), stop.signals):  # the run installs its own when it starts
        code = command(request, call)
        if stop.requested and code != EXIT_INTERRUPTED:  # came after the run's handler
            raise KeyboardInterrupt
    return code


def interrupted_when(stop: StopRequest) -> str:
    """When a KeyboardInterrupt that reached main came: before the run or after it."""
    when = "after the run finished" if stop.run_began else "before the run started"
    if not stop.run_began and os.environ.get("TORCHELASTIC_RUN_ID") is not None:
        when += (" (under torchrun: torchrun stops every rank once one has ended; another "
                 "rank's message says why)")
    return when


def shipped_configs() -> Path:
    """The shipped configs, by scenario: demos/configs in an installed copy (the package data
    of demos.configs), else configs/ beside the package, in a checkout."""
    package = Path(__file__).resolve().parents[2]
    installed = package / "configs"
    return installed if installed.is_dir() else package.parent / "configs"


CONFIGS = shipped_configs()


def by_name(argv: list[str], registry: Callable[[], Registry]) -> list[str]:
    """`NAME [options]`: the scenario NAME run with its shipped config, configs/NAME.yaml; a
    word that is neither a command nor a scenario gets a did-you-mean from both."""
    if not argv or argv[0].startswith("-") or argv[0] in COMMANDS:
        return argv
    names = list(registry())
    if argv[0] not in names:
        hint = (f"; a config file goes after --config: --config {argv[0]}"
                if argv[0].endswith((".yaml", ".yml")) or os.sep in argv[0]
                else did_you_mean(argv[0], [*COMMANDS, *names]))
        raise ConfigError(f"{argv[0]}: not a command or a scenario{hint}")
    path = CONFIGS / f"{argv[0]}.yaml"
    if not path.is_file():
        raise ConfigError(f"{argv[0]}: its config {path} is not here; python -m "
                          f"demos.scenarios.{argv[0]} runs it on its defaults")
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    return ["run", "--config", shown, *argv[1:]]


# The run itself: torch loads here.

def start(args: RunRequest, cfg, configured, registry: Registry, base, call: Call) -> int:
    """Load torch, resolve the device, prepare the entries (user code loads now), and run:
    alone, or as one rank under torchrun."""
    from demos.lab.pages import artifacts
    from demos.lab.runner import torchrun as distributed

    stop = call.stop
    world = distributed.from_env()  # under torchrun: which rank this process is
    stop.deferred = True  # until torch has loaded: a signal is noted, not raised
    if world.primary:
        artifacts.pool()  # the drawing helper starts now, beside torch's import
    try:
        from demos.lab.runner.device import (  # the heavy imports (torch) start here
            global_state,
            resolve_device,
            restore_global_state,
        )
        from demos.lab.runner.run import RunOptions, execute
    except Exception as e:  # e.g. TORCH_LOGS=nonsense: torch refuses its environment
        raise ConfigError(torch_refused(e)) from None

    try:
        device, note = resolve_device(cfg.device)
    except ConfigError as e:
        where = "--device" if args.device is not None else f"{args.config}: device"
        raise ConfigError(f"{where} {cfg.device}: {e}") from None
    finally:
        stop.deferred = False
    stop_if_requested(stop)  # a safe point: torch has loaded
    notes, before = [], global_state()
    for i, entry in enumerate(cfg.scenarios):  # the run starts: now user code may load
        prepare = registry[entry.scenario].prepare
        if prepare is not None:
            try:
                prepare(entry, f"scenarios[{i}]")
            except ConfigError as e:
                raise ConfigError(f"{args.config}: {e}") from None
            changed = restore_global_state(before)
            if changed:  # at import: it would change the entries before this one too (and
                #          a working directory changed would move the run's folder)
                notes.append(f"{entry.id}: its code changed {'; '.join(changed)} when it was "
                             f"loaded; set back: every entry runs with the run's own")
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
    try:
        if not world.primary:  # under torchrun, a rank but 0: the data-parallel entries alone
            from demos.lab.runner.other_ranks import follow
            return follow(cfg, registry, device, world, stop)
        if base is not None:
            from demos.lab.comparing.baseline import Comparison
            base = Comparison(args.baseline, base, configured.scenarios,
                              [e.id for e in cfg.scenarios], str(device), world_size=world.size)
        progress = not args.no_progress and sys.stderr.isatty()
        options = RunOptions(source=str(args.config), command=call.command, device_note=note,
                             progress=progress, dry_run=args.dry_run, open_report=args.open,
                             sets=[str(s) for s in args.sets], baseline=base,
                             save_baseline=args.save_baseline, run_name=args.run_name,
                             notes=notes, stop=stop, world=world)
        return execute(cfg, registry, device, Path(args.output_dir), options, call.keep)
    finally:
        distributed.leave(world)


def index(output_dir: Path) -> None:
    """Rebuild outputs/index.html so that it lists a new sweep or comparison."""
    from demos.lab.pages.index import write_index
    try:
        write_index(output_dir)
    except Exception as e:  # a lock held too long, a folder it cannot read: not the work lost
        say(f"warning: index.html not rebuilt ({e}); the next run rebuilds it", err=True)
