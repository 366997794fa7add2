"""A rank but 0 under torchrun: it runs the data-parallel entries beside rank 0 and writes
nothing but its log, rank<N>.log in rank 0's run folder (see demos.lab.runner.torchrun).

Exit codes: 0 its entries ran; 1 one raised (torchrun then stops the other ranks and exits
non-zero); 2 rank 0 could not make the run folder; 130 interrupted.
"""
from __future__ import annotations

import traceback
from pathlib import Path

import torch

from demos.lab.core.config import RunConfig
from demos.lab.core.results import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from demos.lab.core.scenario import Registry
from demos.lab.core.signals import StopRequest
from demos.lab.runner import torchrun as distributed
from demos.lab.runner.context import Context, Diverged, Interrupted, Shared
from demos.lab.runner.device import torch_settings
from demos.lab.runner.torchrun import World


def follow(cfg: RunConfig, registry: Registry, device: torch.device, world: World,
           stop: StopRequest) -> int:
    """Run this rank's part of the run; return its exit code."""
    folder = distributed.share(world, None)
    if folder is None:  # rank 0 said why (exit 2)
        return EXIT_USAGE
    run_dir = Path(folder)
    with distributed.rank_log(run_dir, world) as log, \
            torch_settings(cfg.threads, cfg.deterministic, world.local_size) as det:
        log.info("rank %d of %d (%s), device %s, %d CPU thread(s), seed %d", world.rank,
                 world.size, world.backend, device, det["cpu_threads"], cfg.seed)
        return run_entries(cfg, registry, device, world, stop, run_dir, log)


def run_entries(cfg: RunConfig, registry: Registry, device: torch.device, world: World,
                stop: StopRequest, run_dir: Path, log) -> int:
    for entry in cfg.scenarios:
        scenario = registry[entry.scenario]
        if not scenario.data_parallel:
            continue
        if not distributed.wait_for_entry(entry.id):
            log.info("%s: rank 0 gave the process group up; nothing more to run", entry.id)
            return EXIT_OK  # rank 0 reports why
        log.info("start %s (%s)", entry.id, entry.scenario)
        ctx = Context(entry, run_dir / entry.id, log,
                      Shared(device, seed=cfg.seed, stop=stop, world=world))
        torch.manual_seed(cfg.seed)
        try:
            scenario.run(entry, ctx)
        except (Interrupted, KeyboardInterrupt):
            log.info("%s interrupted by %s at step %d", entry.id, stop.requested or "SIGINT",
                     ctx.steps_run)
            return EXIT_INTERRUPTED
        except Exception as e:  # a peer that left shows up here as a collective error
            if stop.requested:
                log.info("%s interrupted by %s (%s)", entry.id, stop.requested, e)
                return EXIT_INTERRUPTED
            if distributed.rank0_gave_up():
                log.info("%s: rank 0 gave the process group up (%s)", entry.id, e)
                return EXIT_OK  # rank 0 reports its own failure
            level = log.info if isinstance(e, Diverged) else log.error
            level("%s raised: %s\n%s", entry.id, e, traceback.format_exc())
            distributed.leave(world)  # rank 0, if it waits on this rank, fails now
            return EXIT_FAILED
        log.info("%s done: %d steps in %.2f s", entry.id, ctx.steps_run, ctx.train_s or 0)
    return EXIT_OK
