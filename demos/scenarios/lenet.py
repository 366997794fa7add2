"""lenet: the document's LeNet-style CNN as an nn.Module, trained on real handwritten digits.

Document 004, first example: conv 1->6 3x3, conv 6->16 3x3 (each ReLU + 2x2 max-pool),
fc 16*6*6 -> 120 -> 84 -> 10, input 1x32x32. The shipped 8x8 digits are upscaled to 32x32;
MNIST's 28x28 images (dataset: mnist) are padded to 32x32, as LeNet-5 did. The
document's one-step walk-through (a random input, MSE against a random target, backward,
one SGD step) is replayed as checks.

    python runner.py --config configs/lenet.yaml
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from demos.lab.core.results import Check, Result
from demos.lab.core.scenario import TRAINING_FILES, Scenario, ScenarioConfig, graph_files
from demos.lab.core.schema import ConfigError, param

if TYPE_CHECKING:
    import torch

    from demos.lab.runner.context import Context
    from demos.documents.models import Net


@dataclass
class Config(ScenarioConfig):
    """The LeNet-style CNN as an nn.Module, trained on real handwritten digits (doc 004)."""
    dataset: Literal["digits", "synthetic", "mnist"] = param(
        "digits", "digits (shipped, real), synthetic (random images and labels, as in the "
                  "tutorial: quick, nothing to learn) or mnist (IDX files)")
    root: str | None = param(None, "mnist only: the folder with train-images-idx3-ubyte, "
                                   "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                                   "t10k-labels-idx1-ubyte (each may be .gz)", path="dir")
    max_images: int | None = param(None, "use at most this many train (and test) images",
                                   ge=10, le=10**8)
    synthetic_size: int = param(512, "synthetic only: how many random images (4 KB each)",
                                ge=10, le=10**5)
    epochs: int = param(15, "passes over the training split", ge=1, le=10**6)
    batch_size: int = param(64, "images per mini-batch", ge=1, le=10**6)
    optimizer: Literal["adam", "sgd"] = param("adam", "torch.optim optimizer")
    lr: float = param(2e-3, "learning rate", gt=0)
    momentum: float = param(0.9, "momentum (sgd only)", ge=0, lt=1)
    test_fraction: float = param(0.2, "share of the images held out for testing (a seeded "
                                      "split); MNIST uses its own test set", gt=0, lt=1)
    checkpoint_every: int | None = param(None, "also save checkpoint_epoch<N>.pt every N "
                                               "epochs; checkpoint.pt is always saved at the "
                                               "end", ge=1, le=10**6)
    resume: str | None = param(None, "continue from this checkpoint (a .pt saved by lenet): "
                                     "weights, optimizer and shuffling state", path="file")
    compile: bool = param(False, "run the network through torch.compile")
    bucket_cap_mb: float = param(25.0, "under torchrun: the size of DDP's gradient buckets, in "
                                       "MiB (smaller: more buckets, all-reduced as backward "
                                       "reaches them)", gt=0, le=10**4)
    mistake: Literal["none", "no_allreduce", "local_batch", "rank_lr", "rank0_raises"] = param(
        "none", "under torchrun: a deliberate DDP mistake, to see the checks catch it: "
                "no_allreduce (gradients stay local), local_batch (each rank takes the whole "
                "batch), rank_lr (the ranks but 0 step with twice the lr); or rank0_raises "
                "(rank 0 alone fails at step 3: no rank is left waiting)")

    def check_world(self, size: int, where: str) -> None:
        """Under torchrun with `size` processes: what data-parallel training needs."""
        if self.batch_size % size:
            raise ConfigError(f"{where}.batch_size: {self.batch_size} is the global batch; it "
                              f"must divide among the {size} processes")
        if self.resume is not None:
            raise ConfigError(f"{where}.resume: not under torchrun (resume a single process)")
        if self.compile:
            raise ConfigError(f"{where}.compile: not under torchrun (DDP and torch.compile "
                              f"need their own settings; run it as one process)")

    def validate(self, where: str) -> None:
        if self.resume is not None and not os.path.isfile(self.resume):
            what = ("no such checkpoint file" if not os.path.exists(self.resume) else
                    "is a directory, not a checkpoint file" if os.path.isdir(self.resume) else
                    "not a regular file (a FIFO or device?), not a checkpoint file")
            raise ConfigError(f"{where}.resume: {self.resume}: {what}")
        if self.dataset != "mnist":
            if self.root is not None:
                raise ConfigError(f"{where}.root: only used with dataset: mnist "
                                  f"(dataset is {self.dataset})")
            return
        if self.root is None:
            raise ConfigError(f"{where}.root: dataset mnist needs root: the folder with "
                              f"train-images-idx3-ubyte and the other MNIST IDX files")
        from demos.documents.datasets import DataError, find_mnist_files
        try:
            find_mnist_files(self.root)
        except DataError as e:
            raise ConfigError(f"{where}.root: {e}") from None


def load_data(cfg: Config, g: torch.Generator):
    """Images (n, 1, 32, 32), labels (n,), and the train / test indices into them."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from demos.documents.datasets import load_digits, load_mnist

    if cfg.dataset == "mnist":
        train_x, train_y, test_x, test_y = load_mnist(cfg.root)
        images = torch.from_numpy(np.concatenate([train_x, test_x])).unsqueeze(1)  # (n, 1, 28, 28)
        x = F.pad(images, (2, 2, 2, 2))                                   # (n, 1, 32, 32)
        labels = torch.from_numpy(np.concatenate([train_y, test_y]))
        train = torch.randperm(len(train_x), generator=g)
        test = len(train_x) + torch.arange(len(test_x))
    else:
        if cfg.dataset == "digits":
            images, digits = load_digits()
            x = torch.from_numpy(images).unsqueeze(1) / 16.0              # (n, 1, 8, 8)
            x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
            labels = torch.from_numpy(digits)
        else:  # synthetic: the tutorial's random tensors, random labels (nothing to learn)
            x = torch.randn(cfg.synthetic_size, 1, 32, 32, generator=g)
            labels = torch.randint(0, 10, (cfg.synthetic_size,), generator=g)
        order = torch.randperm(len(x), generator=g)
        n_test = max(1, int(len(x) * cfg.test_fraction))
        test, train = order[:n_test], order[n_test:]
    if cfg.max_images is not None:
        train, test = train[:cfg.max_images], test[:cfg.max_images]
    return x, labels, train, test


def standardize(x: torch.Tensor, train: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit variance, with the statistics of the training images only."""
    from demos.documents.datasets import DataError

    if len(train) < 2:
        raise DataError(f"{len(train)} training image(s): too few to train on")
    mean, std = x[train].mean(), x[train].std()
    if not std > 0:
        raise DataError("every training image has the same pixels: nothing to learn")
    return (x - mean) / std


def walk_through(net: Net, ctx: Context) -> list[Check]:
    """The document's single step: forward, MSE, backward, one SGD step; as checks."""
    import copy

    import torch
    import torch.nn.functional as F

    from demos.lab.checks import gradients as checks
    net = copy.deepcopy(net)
    input = torch.randn(1, 1, 32, 32, device=ctx.device)
    target = torch.randn(1, 10, device=ctx.device)
    out = net(input)
    ctx.graph(out, dict(net.named_parameters()))
    loss = F.mse_loss(out, target)
    net.zero_grad()
    before = net.conv1.bias.grad
    loss.backward()
    after = net.conv1.bias.grad
    weight = net.conv1.weight.detach().clone()
    torch.optim.SGD(net.parameters(), lr=0.01).step()
    ctx.log.info("  conv1.bias.grad before backward: %s; after: %s", before,
                 None if after is None else [round(v, 6) for v in after.tolist()])
    return [
        checks.check("conv1.bias.grad is None before backward", before is None, f"{before}"),
        checks.check("conv1.bias.grad is set after backward",
                     after is not None and after.shape == (6,) and bool(after.abs().sum() > 0),
                     f"shape {None if after is None else tuple(after.shape)}"),
        checks.check("one SGD step changes the weights",
                     not torch.equal(weight, net.conv1.weight.detach()),
                     f"max change in conv1.weight "
                     f"{(weight - net.conv1.weight.detach()).abs().max().item():.3g}"),
    ]


# what a checkpoint must share with the run that resumes it: the data, its split and shuffles
SAME = ("seed", "dataset", "root", "max_images", "synthetic_size", "test_fraction",
        "batch_size", "optimizer")


def settings(cfg: Config, ctx: Context) -> dict:
    return {k: ctx.seed if k == "seed" else getattr(cfg, k) for k in SAME}


def state(cfg: Config, ctx: Context, net: Net, opt, epoch: int, step: int) -> dict:
    """What continuing needs: weights and optimizer (the shuffles follow from the seed), and
    where: after `step` steps, in epoch `epoch` (mid-epoch when the run was interrupted)."""
    return {"epoch": epoch, "step": step, "model": net.state_dict(),
            "optimizer": opt.state_dict(), "config": settings(cfg, ctx)}


def check_optimizer(opt) -> None:
    """What load_state_dict does not check: each parameter's state has its shape, and the
    hyperparameters are numbers (else the first opt.step() fails, far from the file)."""
    import math

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


def resume(cfg: Config, ctx: Context, net: Net, opt, n_batches: int) -> int:
    """Load a checkpoint into net and opt; return the step it was saved after."""
    from demos.lab.checks.gradients import one_line

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


class Shuffles:
    """Each epoch's order of the training images, drawn from the seeded generator in epoch
    order when the epoch starts (memory for one order, not one per epoch), and copied to the
    device once per epoch."""

    def __init__(self, train, g):
        self.train, self.g, self.drawn = train, g, 0

    def __call__(self, epoch: int):
        import torch

        while self.drawn <= epoch:  # a resumed run draws the epochs it skips, to stay in step
            perm = torch.randperm(len(self.train), generator=self.g)
            self.drawn += 1
        return self.train[perm.to(self.train.device)]


EVAL_CHUNK = 1024  # test images per forward pass: bounded memory, whatever the test split


def accuracy(model, x, labels, test):
    """The share of test images classified right, in chunks; a tensor (no sync here)."""
    import torch

    with torch.no_grad():
        right = sum((model(x[c]).argmax(1) == labels[c]).sum() for c in test.split(EVAL_CHUNK))
    return right.float() / len(test)


def train_steps(cfg: Config, ctx: Context, model, opt, x, labels, shuffles: Shuffles, test,
                n_batches: int, start: int, net: Net, batch_size: int, sync=contextlib.nullcontext,
                after_step=None) -> None:
    """The training loop: a mini-batch per step, the test accuracy after each epoch.

    Under torchrun, `batch_size` is this rank's share, `sync` is DDP's no_sync for the
    no_allreduce mistake, and `after_step(t)` keeps the weights the equivalence check needs.
    """
    import torch.nn.functional as F

    order = None
    for t in ctx.steps(cfg.epochs * n_batches, start=start):
        epoch, i = divmod(t, n_batches)
        if order is None or i == 0:
            order = shuffles(epoch)
        batch = order[i * batch_size:(i + 1) * batch_size]
        with sync():
            loss = F.cross_entropy(model(x[batch]), labels[batch])
            ctx.record(t, loss=loss)
            opt.zero_grad()
            loss.backward()  # under DDP: buckets all-reduced as their grads accumulate
        opt.step()
        if after_step is not None:
            after_step(t)
        if i == n_batches - 1:
            ctx.record(t, always=True, epoch=epoch + 1,
                       test_accuracy=accuracy(model, x, labels, test))
            if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
                ctx.save_state(f"checkpoint_epoch{epoch + 1}.pt",
                               state(cfg, ctx, net, opt, epoch + 1, t + 1))


def run(cfg: Config, ctx: Context) -> Result:
    import torch

    from demos.lab.checks import gradients as checks
    from demos.lab.runner.context import Interrupted
    from demos.documents.models import Net

    net = Net().to(ctx.device)
    ctx.log.info("%s", net)
    n_tensors = len(list(net.parameters()))
    n_params = sum(p.numel() for p in net.parameters())
    found = [checks.check("10 parameter tensors", n_tensors == 10, f"{n_tensors} tensors"),
             checks.check("81,194 parameters", n_params == 81194, f"{n_params:,} parameters")]
    found += walk_through(net, ctx)

    g = torch.Generator().manual_seed(ctx.seed)
    x, labels, train, test = load_data(cfg, g)
    x = standardize(x, train).to(ctx.device)
    labels, train, test = labels.to(ctx.device), train.to(ctx.device), test.to(ctx.device)
    n_test = len(test)
    n_batches = -(-len(train) // cfg.batch_size)
    def make_optimizer(module, lr):
        if cfg.optimizer == "adam":
            return torch.optim.Adam(module.parameters(), lr=lr)
        return torch.optim.SGD(module.parameters(), lr=lr, momentum=cfg.momentum)

    if ctx.world.active:
        return run_parallel(cfg, ctx, net, make_optimizer, x, labels, train, test, found)
    if cfg.mistake != "none":
        ctx.warn_once(f"{cfg.id}: mistake {cfg.mistake} takes effect under torchrun only")
    opt = make_optimizer(net, cfg.lr)
    start = resume(cfg, ctx, net, opt, n_batches) if cfg.resume else 0
    model = torch.compile(net) if cfg.compile else net  # shares net's parameters

    try:
        train_steps(cfg, ctx, model, opt, x, labels, Shuffles(train, g), test, n_batches,
                    start, net, cfg.batch_size)
    except Interrupted as stop:  # keep what was earned: a checkpoint to resume from, the checks
        ctx.save_state("checkpoint.pt", state(cfg, ctx, net, opt, ctx.steps_run // n_batches,
                                              ctx.steps_run))
        stop.result = Result(metrics={"parameters": float(n_params)}, checks=found)
        raise
    ctx.save_state("checkpoint.pt", state(cfg, ctx, net, opt, cfg.epochs,
                                          cfg.epochs * n_batches))
    return finish(cfg, ctx, net, train, n_test, found)


def finish(cfg: Config, ctx: Context, net: Net, train, n_test: int, found: list[Check],
           **extra) -> Result:
    """The accuracy plot and the result, after training."""
    epochs = [row for row in ctx.history() if "test_accuracy" in row]
    ctx.plot("accuracy.png", [r["epoch"] for r in epochs],
             {"test accuracy": [r["test_accuracy"] for r in epochs]},
             title=f"LeNet on {len(train)} {cfg.dataset} images, tested on {n_test}",
             xlabel="epoch",
             ylabel="test accuracy", logy=False, markers=True)
    n_params = sum(p.numel() for p in net.parameters())
    return Result(
        metrics={"final_loss": ctx.last("loss"), "test_accuracy": ctx.last("test_accuracy"),
                 "parameters": float(n_params)},
        checks=found, **extra)


def run_parallel(cfg: Config, ctx: Context, net: Net, make_optimizer, x, labels, train, test,
                 found: list[Check]) -> Result:
    """Under torchrun: DDP, each rank its slice of every global batch; then the checks that
    make it trustworthy (see demos.documents.parallel). Every rank runs this; rank 0 reports."""
    import contextlib

    from demos.documents import parallel
    from demos.lab.checks import gradients as checks
    from demos.lab.runner.torchrun import same_everywhere

    world = ctx.world
    model = parallel.wrap(net, ctx, cfg.bucket_cap_mb)  # rank 0's weights, on every rank
    start = {k: v.clone() for k, v in net.state_dict().items()}
    lr = cfg.lr * (2 if cfg.mistake == "rank_lr" and world.rank > 0 else 1)
    opt = make_optimizer(net, lr)
    shuffles = parallel.RankShuffles(train, world.size, world.rank, ctx.seed)
    batch = parallel.local_batch(cfg, world.size)
    n_batches = -(-len(shuffles) // batch)
    k = min(parallel.EQUIVALENCE_STEPS, cfg.epochs * n_batches)
    kept = {}

    def keep(t: int) -> None:  # after the optimizer step: .grad is still this step's
        if cfg.mistake == "rank0_raises" and world.rank == 0 and t == 2:
            raise RuntimeError("mistake rank0_raises: rank 0 fails alone at step 3")
        if t == 0:
            kept["grad"] = parallel.flat_grad(net)
        if t == k - 1:
            kept["weights"] = parallel.flat(net)

    sync = model.no_sync if cfg.mistake == "no_allreduce" else contextlib.nullcontext
    train_steps(cfg, ctx, model, opt, x, labels, shuffles, test, n_batches, 0, net, batch,
                sync, keep)
    ctx.save_state("checkpoint.pt", state(cfg, ctx, net, opt, cfg.epochs,
                                          cfg.epochs * n_batches))
    same, detail = same_everywhere(world, parallel.flat(net))  # every rank takes part
    sizes = parallel.buckets(model)
    found.append(checks.check("weights identical on every rank", same, detail))
    if world.primary:
        one = parallel.reference(cfg, ctx, start, make_optimizer, x, labels, train, k)
        found.append(checks.check("DDP equals one process over the first steps",
                                  *parallel.equivalence(kept, one, parallel.flat_state(start),
                                                        k)))
    note = (f"{len(sizes)} gradient bucket(s) ({', '.join(f'{b:,}' for b in sizes)} bytes; cap "
            f"{cfg.bucket_cap_mb:g} MiB), all-reduced over {world.size} ranks ({world.backend}) "
            f"while backward runs; {batch} images per rank and step")
    ctx.log.info("  DDP: %s", note)
    return finish(cfg, ctx, net, train, len(test), found,
                  inspection={"DDP": note, "gradient buckets": len(sizes)})


SCENARIO = Scenario(
    name="lenet", config=Config, run=run, document="004, first example",
    metrics=("final_loss", "test_accuracy", "parameters"),
    files=(*TRAINING_FILES, *graph_files("graph"), "explain.txt", "accuracy.png",
           "checkpoint.pt"),
    dry_run={"epochs": 1}, data_parallel=True)
