"""The command line, `python runner.py [run] --config configs/all.yaml [options]` or `python
runner.py SCENARIO [options]`, and `perform`, where it and the Python API hand in the run they
ask for (a demos.lab.runner.options.RunRequest).

Generic: the scenarios come in from the caller (`demos.cli`), as a function returning the
registry. Imports nothing heavy until a run really starts: --help and --list answer without
torch, matplotlib or the user's code. Exit codes: demos/docs/command-line.md.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from demos.lab.core import config as config_mod
from demos.lab.core import user_code
from demos.lab.core.console import say, silence
from demos.lab.core.layout import check_output_dir
from demos.lab.core.results import EXIT_INTERRUPTED, EXIT_USAGE
from demos.lab.core.scenario import Registry, torch_refused
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import StartUp, StopRequest, signal_handler, stop_if_requested
from demos.lab.runner.options import RunRequest, check_run, load_baseline, parse


@dataclass
class Call:
    """What a run gets besides its request."""
    registry: Callable[[], Registry]
    stop: StopRequest
    keep: Callable[[Any], None] | None = None  # handed the Run made (demos.run)


def run_request(r: RunRequest, call: Call) -> int:
    """The config once; or, with --ensemble, once per variant for a baseline's bands."""
    if r.list:
        say(list_scenarios(call.registry()))
        return 0
    check_run(r)
    if not r.config:
        raise ConfigError("--config PATH is required (or --list); e.g. --config configs/all.yaml")
    check_output_dir(r.output_dir)
    registry = call.registry()
    base = load_baseline(r.baseline, r.dry_run)
    if r.ensemble is not None:
        from demos.lab.comparing.ensemble import run_ensemble
        cfg = load(r, registry)
        if r.only:
            cfg = config_mod.select(cfg, ",".join(r.only), r.config)
        if cfg.device not in ("auto", "cpu"):  # one this machine lacks: before any variant
            device_of(r, cfg)
        code = run_ensemble(r, cfg, Path(r.output_dir), call.stop)
        from demos.lab.runner.outputs import write_index  # its folder, among the runs
        write_index(Path(r.output_dir), lambda message: say(f"warning: {message}", err=True))
        return code
    if r.watch:
        from demos.lab.runner.watch import watch
        # the newest run alone: an older one holds the user's old code
        made: deque[Any] = deque(maxlen=1)
        call = dataclasses.replace(call, keep=made.append)
        return watch(r.config, Path(r.output_dir),  # the baseline read anew each time
                     lambda: run_once(r, registry, load_baseline(r.baseline, r.dry_run), call),
                     lambda: Path(made[-1].dir) if made else None, call.stop,
                     also=(r.baseline,) if r.baseline else ())
    return run_once(r, registry, base, call)


def run_once(r: RunRequest, registry: Registry, base: Any, call: Call) -> int:
    """The config, loaded now (again, under --watch), and run once."""
    from demos.lab.runner import torchrun as distributed
    if not r.print_config and distributed.from_env().primary:
        from demos.lab.pages import artifacts
        artifacts.pool()  # the drawing helper starts now, beside torch's import (a scenario
        #                   file may import torch as the config loads)
    cfg = configured = load(r, registry)
    kept = cfg.explicit  # --dry-run keeps what --set gave
    if r.only:
        cfg = config_mod.select(cfg, ",".join(r.only), r.config)
    if r.dry_run:
        cfg = config_mod.shrink(cfg, registry, kept)
    for entry in cfg.scenarios:  # what the config cannot hold (check_function's objects)
        for name, value in r.objects.get(entry.id, {}).items():
            setattr(entry, name, value)
    if r.print_config:
        say(config_mod.dump(cfg).removesuffix("\n"))
        return 0
    return start(r, cfg, configured, registry, base, call)


def load(r: RunRequest, registry: Registry) -> config_mod.RunConfig:
    """The request's config, its overrides applied and validated: from its file, or from the
    data it was given (a copy: the overrides never change the caller's)."""
    if r.data is None:
        return config_mod.load(str(r.config), registry, r.overrides)
    return config_mod.load_data(copy.deepcopy(dict(r.data)), str(r.config), registry,
                                r.overrides)


def list_scenarios(registry: Registry) -> str:
    """A line per scenario; read from the files where the registry can (nothing imported)."""
    about = getattr(registry, "about", lambda name: registry[name].about)
    width = max(map(len, registry))
    return "\n".join(f"{name:<{width}}  {about(name)}" for name in registry)


def main(argv: list[str], registry: Callable[[], Registry], prog: str = "runner.py",
         stop: StopRequest | None = None, request: RunRequest | None = None) -> int:
    """Run the command line `argv` over the scenarios of `registry()`, or the `request` made
    of it already; return the exit code. `stop` is the caller's, when it noted signals
    already (see demos.cli)."""
    code, stop = 0, stop or StopRequest()
    try:
        request = request or parse(argv, prog, list(registry()), CONFIGS)
        code = perform(request, Call(registry, stop))
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


def perform(request: RunRequest, call: Call) -> int:
    """The run `request` asks for (the command line's, or one the Python API built); its exit
    code. Raises ConfigError (a usage or config error: nothing ran) and KeyboardInterrupt (a
    signal outside the run's own handler), for main to say, or for demos.run to raise in its
    caller."""
    stop = call.stop
    changed = user_code.new_run()  # a run again in this process: a file edited since loads anew
    if changed:
        say(f"{', '.join(map(os.path.basename, changed))} changed since loaded: the user's code "
            f"loads anew")
    with signal_handler(StartUp(stop), stop.signals):  # the run installs its own when it starts
        code = run_request(request, call)
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


# The shipped configs, by scenario: demos/configs in an installed copy (the package data of
# demos.configs), else configs/ beside the package, in a checkout.
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
if not CONFIGS.is_dir():
    CONFIGS = CONFIGS.parents[1] / "configs"


# The run itself: torch loads here.

def start(r: RunRequest, cfg, configured, registry: Registry, base, call: Call) -> int:
    """Load torch, resolve the device, prepare the entries (user code loads now), and run:
    alone, or as one rank under torchrun."""
    from demos.lab.runner import torchrun as distributed

    stop = call.stop
    world = distributed.from_env()  # under torchrun: which rank this process is
    stop.deferred = True  # until torch has loaded: a signal is noted, not raised
    try:
        from demos.lab.runner.run import RunOptions, execute  # the heavy imports (torch)
        from demos.lab.state import global_state, restore_global_state
    except Exception as e:  # e.g. TORCH_LOGS=nonsense: torch refuses its environment
        raise ConfigError(torch_refused(e)) from None

    try:
        device, note = device_of(r, cfg)
    finally:
        stop.deferred = False
    stop_if_requested(stop)  # a safe point: torch has loaded
    notes, before = [], global_state()
    try:
        for i, entry in enumerate(cfg.scenarios):  # the run starts: now user code may load
            prepare = registry[entry.scenario].prepare
            if prepare is not None:
                prepare(entry, f"scenarios[{i}]")
                changed = restore_global_state(before)
                if changed:  # at import: it would change the entries before this one too
                    #          (and a working directory changed would move the run's folder)
                    notes.append(f"{entry.id}: its code changed {'; '.join(changed)} when it "
                                 f"was loaded; set back: every entry runs with the run's own")
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
    try:
        if not world.primary:  # under torchrun, a rank but 0: the data-parallel entries alone
            from demos.lab.runner.other_ranks import follow
            return follow(cfg, registry, device, world, stop)
        if base is not None:
            from demos.lab.comparing.baseline import Comparison
            base = Comparison(r.baseline, base, configured.scenarios,
                              [e.id for e in cfg.scenarios], str(device), world_size=world.size)
        options = RunOptions(note, progress=not r.no_progress and sys.stderr.isatty(),
                             baseline=base, notes=notes, stop=stop, world=world)
        return execute(cfg, registry, device, r, options, call.keep)
    finally:
        distributed.leave(world)


def device_of(r: RunRequest, cfg: config_mod.RunConfig) -> tuple[Any, str]:
    """The config's device, resolved (torch loads), and how it was chosen; a device this
    machine lacks is a ConfigError naming where it was asked for."""
    from demos.lab.runner.device import resolve_device
    try:
        return resolve_device(cfg.device)
    except ConfigError as e:
        where = "--device" if r.device is not None else f"{r.config}: device"
        raise ConfigError(f"{where} {cfg.device}: {e}") from None
