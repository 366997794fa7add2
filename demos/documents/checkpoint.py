"""LeNet's checkpoint: what a run saves so that another run can continue it, and the checks that
a file given to `resume` is such a checkpoint and fits this run.

A checkpoint holds the weights, the optimizer's state, where the run stopped (epoch, step) and
the settings the resumed run must share with it (SAME): the shuffles follow from the seed, so
they are not saved. Every problem is a ValueError naming the file and what is wrong with it.
Imports no torch until a function needs it (the scenario file imports this module).
"""
from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

    from demos.lab.runner.context import Context

# what a checkpoint must share with the run that resumes it: the data, its split and shuffles
SAME = ("seed", "dataset", "root", "max_images", "synthetic_size", "test_fraction",
        "batch_size", "optimizer")


def file_problem(path: str) -> str | None:
    """Why `path` cannot be a checkpoint file (for the config's check), or None."""
    if os.path.isfile(path):
        return None
    return ("no such checkpoint file" if not os.path.exists(path) else
            "is a directory, not a checkpoint file" if os.path.isdir(path) else
            "not a regular file (a FIFO or device?), not a checkpoint file")


def settings(cfg: Any, ctx: Context) -> dict:
    """This run's values of SAME."""
    return {k: ctx.seed if k == "seed" else getattr(cfg, k) for k in SAME}


def state(cfg: Any, ctx: Context, net: torch.nn.Module, opt: torch.optim.Optimizer, epoch: int,
          step: int) -> dict:
    """What continuing needs: weights and optimizer (the shuffles follow from the seed), and
    where: after `step` steps, in epoch `epoch` (mid-epoch when the run was interrupted)."""
    net = getattr(net, "_orig_mod", net)  # torch.compile's module: the one it compiled
    return {"epoch": epoch, "step": step, "model": net.state_dict(),
            "optimizer": opt.state_dict(), "config": settings(cfg, ctx)}


def every(cfg: Any, ctx: Context, net: torch.nn.Module, opt: torch.optim.Optimizer, epoch: int,
          step: int) -> None:
    """After epoch `epoch` (step `step`): checkpoint_epoch<N>.pt, where cfg.checkpoint_every
    divides N."""
    if cfg.checkpoint_every and epoch % cfg.checkpoint_every == 0:
        ctx.save_state(f"checkpoint_epoch{epoch}.pt", state(cfg, ctx, net, opt, epoch, step))


def check_optimizer(opt: torch.optim.Optimizer) -> None:
    """What load_state_dict does not check: each parameter's state has its shape, and the
    hyperparameters are numbers (else the first opt.step() fails, far from the file)."""
    import torch

    for group in opt.param_groups:
        for key in ("lr", "momentum", "eps", "weight_decay"):
            value = group.get(key, 0.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value):
                raise ValueError(f"optimizer {key} is {value!r}")
        for p in group["params"]:
            for name, value in opt.state.get(p, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != p.shape:
                    raise ValueError(f"optimizer state {name} has shape {tuple(value.shape)}, "
                                     f"its parameter {tuple(p.shape)}")


def resume(cfg: Any, ctx: Context, net: torch.nn.Module, opt: torch.optim.Optimizer,
           n_batches: int, one_line: Callable[[BaseException], str]) -> int:
    """Load the checkpoint cfg.resume into net and opt; return the step it was saved after.
    `one_line` writes an exception as one line (the runner's), for the messages."""
    try:
        saved = ctx.load_state(cfg.resume)
    except Exception as e:
        raise ValueError(f"{cfg.resume}: not a checkpoint torch can load ({one_line(e)})") from None
    missing = [k for k in ("epoch", "model", "optimizer", "config")
               if not isinstance(saved, dict) or k not in saved]
    if missing or not isinstance(saved["config"], dict) or not isinstance(saved["epoch"], int):
        raise ValueError(f"{cfg.resume}: not a checkpoint saved by lenet (missing or malformed: "
                         f"{', '.join(missing) or 'config, epoch'})")
    for key, value in settings(cfg, ctx).items():
        if saved["config"].get(key) != value:
            raise ValueError(f"{cfg.resume}: saved with {key}={saved['config'].get(key)!r}, but "
                             f"this run has {key}={value!r}")
    step = saved.get("step", saved["epoch"] * n_batches)
    for key, value in (("epoch", saved["epoch"]), ("step", step)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{cfg.resume}: not a checkpoint saved by lenet ({key} is "
                             f"{value!r}, not a count)")
    try:
        net.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        check_optimizer(opt)
    except Exception as e:
        raise ValueError(f"{cfg.resume}: its weights or optimizer state do not fit this network "
                         f"({one_line(e)})") from None
    if step >= cfg.epochs * n_batches:
        raise ValueError(f"{cfg.resume}: saved after epoch {saved['epoch']}; nothing left to "
                         f"train with epochs={cfg.epochs}")
    ctx.log.info("  resumed from %s after step %d (epoch %d)", cfg.resume, step, saved["epoch"])
    return step
