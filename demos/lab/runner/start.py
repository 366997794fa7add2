"""How a run starts: the one way from a request (the command line's `main`, or the Python API's,
a demos.lab.runner.options.RunRequest) to its exit code, in this module, top to bottom:
`perform` installs the run's signal handler (once, for all of it), then lists the scenarios,
or runs an ensemble, a watch or the config once (`once`); `launch` loads torch, resolves the
device, loads the user's code, makes the run's folder and hands it all to
demos.lab.runner.run.Run. Generic: the scenarios come in from the caller (`demos.cli`), as a
function returning the registry. Nothing heavy is imported until a run really starts: --help
and --list answer without torch, matplotlib or the user's code. Exit codes: command-line.md.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from demos.lab.core.console import say, silence
from demos.lab.core.results import EXIT_INTERRUPTED, EXIT_USAGE
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import SignalHandler, StopRequest, signal_handler, stop_if_requested

if TYPE_CHECKING:
    from demos.lab.core.config import RunConfig
    from demos.lab.core.scenario import Registry
    from demos.lab.runner.options import RunRequest


@dataclass
class Call:
    """What a run gets besides its request."""
    registry: Callable[[], Registry]
    stop: StopRequest
    keep: Callable[[Any], None] | None = None  # handed the Run made (demos.run)


def main(argv: list[str], registry: Callable[[], Registry], prog: str = "runner.py",
         request: RunRequest | None = None) -> int:
    """Run the command line `argv` over the scenarios of `registry()`, or the `request` made
    of it already; return the exit code, each error said in one line."""
    stop = StopRequest()
    code = 0
    try:
        code = perform(lambda: request or parse(argv, prog, registry), Call(registry, stop))
        try:
            sys.stdout.flush()
        except (OSError, ValueError) as e:  # a reader gone away (| head), a full disk
            silence(sys.stdout, e)
    except ConfigError as e:
        say(f"error: {e}", err=True)
        code = EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside the run: start-up, or the end
        say(f"\ninterrupted {interrupted_when(stop)}", err=True)
        code = EXIT_INTERRUPTED
    except BrokenPipeError as e:  # a print of ours while the reader went away (| head)
        silence(sys.stdout, e)
    return code


def parse(argv: list[str], prog: str, registry: Callable[[], Registry]) -> RunRequest:
    from demos.lab.runner.options import CONFIGS
    from demos.lab.runner.options import parse as parse_options

    return parse_options(argv, prog, list(registry()), CONFIGS)


def perform(ask: Callable[[], RunRequest], call: Call) -> int:
    """The run `ask()` gives (the command line's, read once the handler is in place, or one the
    Python API built); its exit code. Raises ConfigError (a usage or config error: nothing ran)
    and KeyboardInterrupt (a signal outside the run), for main to say, or for demos.run to
    raise in its caller."""
    stop = call.stop
    with signal_handler(SignalHandler(stop), stop.signals):
        r = ask()
        from demos.lab.core import user_code
        from demos.lab.runner.options import check_run, load_baseline

        changed = user_code.new_run()  # a run again in this process: an edited file loads anew
        if changed:
            say(f"{', '.join(map(os.path.basename, changed))} changed since loaded: the user's "
                f"code loads anew")
        if r.list:
            say(list_scenarios(call.registry()))
            return 0
        check_run(r)
        if not r.config:
            raise ConfigError("--config PATH is required (or --list); e.g. --config "
                              "configs/all.yaml")
        from demos.lab.core.files import check_output_dir
        check_output_dir(r.output_dir)
        registry = call.registry()
        base = load_baseline(r.baseline, r.dry_run)  # read and checked before any work
        code = (ensemble(r, registry, stop) if r.ensemble is not None else
                watch(r, registry, call) if r.watch else once(r, registry, base, call))
        if stop.requested and code != EXIT_INTERRUPTED:  # came after the run
            raise KeyboardInterrupt
    return code


def ensemble(r: RunRequest, registry: Registry, stop: StopRequest) -> int:
    """--ensemble: the config once per variant, for a baseline's bands."""
    from demos.lab.comparing.ensemble import run_ensemble
    from demos.lab.runner.outputs import write_index

    cfg = selected(r, registry)
    if cfg.device not in ("auto", "cpu"):  # one this machine lacks: before any variant
        device_of(r, cfg)
    code = run_ensemble(r, cfg, Path(r.output_dir), stop)
    write_index(Path(r.output_dir), lambda message: say(f"warning: {message}", err=True))
    return code  # its folder, among the runs, in the index


def watch(r: RunRequest, registry: Registry, call: Call) -> int:
    """--watch: the config again after each change; the newest run alone is kept (an older
    one holds the user's old code)."""
    from collections import deque

    from demos.lab.runner.options import load_baseline
    from demos.lab.runner.watch import watch as watching

    made: deque[Any] = deque(maxlen=1)
    call = replace(call, keep=made.append)
    return watching(r.config, Path(r.output_dir),  # the baseline read anew each time
                    lambda: once(r, registry, load_baseline(r.baseline, r.dry_run), call),
                    lambda: Path(made[-1].dir) if made else None, call.stop,
                    also=(r.baseline,) if r.baseline else ())


def once(r: RunRequest, registry: Registry, base: Any, call: Call) -> int:
    """The config, loaded now (again, under --watch), and run once."""
    from demos.lab.core import config as config_mod
    from demos.lab.runner import torchrun as distributed
    if not r.print_config and distributed.from_env().primary:
        from demos.lab.pages import artifacts
        artifacts.pool()  # the drawing helper starts now, beside torch's import (a scenario
        #                   file may import torch as the config loads)
    configured = loaded(r, registry)
    cfg = selected(r, registry, configured)
    if r.dry_run:
        cfg = config_mod.shrink(cfg, registry, configured.explicit)  # keeps what --set gave
    if r.print_config:
        say(config_mod.dump(cfg).removesuffix("\n"))
        return 0
    return launch(r, cfg, configured, registry, base, call)


def loaded(r: RunRequest, registry: Registry) -> RunConfig:
    """The request's config, its overrides applied and validated: from its file, or from the
    data it was given (a copy: the overrides never change the caller's; the objects in it,
    check_function's, are not copied)."""
    import copy

    from demos.lab.core import config as config_mod
    if r.data is None:
        return config_mod.load(str(r.config), registry, r.overrides)
    return config_mod.load_data(copy.deepcopy(dict(r.data)), str(r.config), registry,
                                r.overrides)


def selected(r: RunRequest, registry: Registry, cfg: RunConfig | None = None) -> RunConfig:
    """The config (loaded, unless given), with --only's entries alone."""
    from demos.lab.core import config as config_mod
    cfg = cfg or loaded(r, registry)
    return config_mod.select(cfg, ",".join(r.only), str(r.config)) if r.only else cfg


def list_scenarios(registry: Registry) -> str:
    """A line per scenario; read from the files where the registry can (nothing imported)."""
    about = getattr(registry, "about", lambda name: registry[name].about)
    width = max(map(len, registry))
    return "\n".join(f"{name:<{width}}  {about(name)}" for name in registry)


def interrupted_when(stop: StopRequest) -> str:
    """When a KeyboardInterrupt that reached main came: before the run or after it."""
    when = "before the run started" if stop.phase == "starting" else "after the run finished"
    if stop.phase == "starting" and os.environ.get("TORCHELASTIC_RUN_ID") is not None:
        when += (" (under torchrun: torchrun stops every rank once one has ended; another "
                 "rank's message says why)")
    return when


# The run itself: torch loads here.

def launch(r: RunRequest, cfg: RunConfig, configured: RunConfig, registry: Registry, base: Any,
           call: Call) -> int:
    """Load torch, resolve the device, prepare the entries (user code loads now), and run:
    alone, or as one rank under torchrun."""
    from demos.lab.runner import torchrun as distributed

    stop = call.stop
    world = distributed.from_env()  # under torchrun: which rank this process is
    stop.deferred = True  # until torch has loaded: a signal is noted, not raised
    try:
        from demos.lab.core.scenario import torch_refused
        try:
            from demos.lab.runner.run import Run, RunOptions  # the heavy imports (torch)
            from demos.lab.state import global_state, restore_global_state
        except Exception as e:  # e.g. TORCH_LOGS=nonsense: torch refuses its environment
            raise ConfigError(torch_refused(e)) from None
        device, note = device_of(r, cfg)
    finally:
        stop.deferred = False
    stop_if_requested(stop)  # a safe point: torch has loaded
    notes, before, prepared = [], global_state(), []
    try:
        for i, entry in enumerate(cfg.scenarios):  # the run starts: now user code may load
            prepare = registry[entry.scenario].prepare
            prepared.append(entry if prepare is None else prepare(entry, f"scenarios[{i}]"))
            changed = restore_global_state(before)
            if changed:  # at import: it would change the entries before this one too (and a
                #          working directory changed would move the run's folder)
                notes.append(f"{entry.id}: its code changed {'; '.join(changed)} when it was "
                             f"loaded; set back: every entry runs with the run's own")
        cfg = replace(cfg, scenarios=prepared)
        for i, entry in enumerate(cfg.scenarios if world.active else []):
            check = getattr(entry, "check_world", None)  # e.g. a global batch the ranks share
            if registry[entry.scenario].data_parallel and check is not None:
                check(world.size, f"scenarios[{i}]")
    except ConfigError as e:
        raise ConfigError(f"{r.config}: {e}") from None
    if world.active:
        world, device = distributed.join(world, device)
        if device.type == "cuda":
            note = f"{note}; under torchrun each rank takes the GPU of its local rank: {device}"
    if base is not None:
        from demos.lab.comparing.baseline import Comparison
        base = Comparison(r.baseline, base, configured.scenarios,
                          [e.id for e in cfg.scenarios], str(device), world_size=world.size)
    stop.phase = "running"  # from here a signal ends in an interrupted run with its summary,
    try:                    # never in "interrupted before the run started"
        if not world.primary:  # under torchrun, a rank but 0: the data-parallel entries alone
            from demos.lab.runner.other_ranks import follow
            return follow(cfg, registry, device, world, stop)
        run = Run(cfg, registry, device, folder(r, world), r, RunOptions(
            note, progress=not r.no_progress and sys.stderr.isatty(), baseline=base,
            notes=notes, stop=stop, world=world))
        if call.keep is not None:
            call.keep(run)
        return run.execute()
    finally:
        stop.phase = "finished"  # (a rank but 0's, or a run that could not make its folder)
        distributed.leave(world)


def folder(r: RunRequest, world: Any) -> Path:
    """The run's folder, made now (--run-name's, or named for the start time), and under
    torchrun told to the other ranks (or that there is none)."""
    import datetime as dt

    from demos.lab.core import files
    from demos.lab.runner import torchrun as distributed

    try:
        made = (files.make_named_dir(Path(r.output_dir), r.run_name) if r.run_name else
                files.make_run_dir(Path(r.output_dir), dt.datetime.now()))
    except ConfigError:
        distributed.share(world, None)
        raise
    distributed.share(world, str(made))
    return made


def device_of(r: RunRequest, cfg: RunConfig) -> tuple[Any, str]:
    """The config's device, resolved (torch loads), and how it was chosen; a device this
    machine lacks is a ConfigError naming where it was asked for."""
    from demos.lab.runner.device import resolve_device
    try:
        return resolve_device(cfg.device)
    except ConfigError as e:
        where = "--device" if r.device is not None else f"{r.config}: device"
        raise ConfigError(f"{where} {cfg.device}: {e}") from None
