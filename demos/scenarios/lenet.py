"""lenet: the document's LeNet-style CNN as an nn.Module, trained on real handwritten digits.

Document 004, first example: conv 1->6 3x3, conv 6->16 3x3 (each ReLU + 2x2 max-pool),
fc 16*6*6 -> 120 -> 84 -> 10, input 1x32x32. The shipped 8x8 digits are upscaled to 32x32;
MNIST's 28x28 images (dataset: mnist) are padded to 32x32, as LeNet-5 did. The
document's one-step walk-through (a random input, MSE against a random target, backward,
one SGD step) is replayed as checks. The data is demos/documents/datasets.py's, the checkpoint
format demos/documents/checkpoint.py's, DDP under torchrun demos/documents/parallel.py's.

    python runner.py --config configs/lenet.yaml
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from demos.api import (
    TRAINING_FILES,
    ConfigError,
    Result,
    Scenario,
    ScenarioConfig,
    graph_files,
    param,
    run_alone,
)
from demos.documents import checkpoint
from demos.documents.datasets import DataError, Shuffles, find_mnist_files

if TYPE_CHECKING:
    from demos.api import Check, Context
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
        problem = None if self.resume is None else checkpoint.file_problem(self.resume)
        if problem:
            raise ConfigError(f"{where}.resume: {self.resume}: {problem}")
        if self.dataset != "mnist":
            if self.root is not None:
                raise ConfigError(f"{where}.root: only used with dataset: mnist "
                                  f"(dataset is {self.dataset})")
            return
        if self.root is None:
            raise ConfigError(f"{where}.root: dataset mnist needs root: the folder with "
                              f"train-images-idx3-ubyte and the other MNIST IDX files")
        try:
            find_mnist_files(self.root)
        except DataError as e:
            raise ConfigError(f"{where}.root: {e}") from None


def recomputed(net: Net, input: Any, ctx: Context) -> None:
    """Beside the walk-through's graph, the same forward under activation checkpointing
    (recomputation): backward keeps only the net's input and runs the forward again, where the
    plain graph keeps every layer's activations. The two ledgers of what backward keeps (in
    explain.txt) show the trade."""
    from torch.utils.checkpoint import checkpoint

    leaf = input.detach().clone().requires_grad_()  # checkpoint needs an input that does
    ctx.forward(lambda: checkpoint(net, leaf, use_reentrant=True),
                {"input": leaf, **dict(net.named_parameters())}, name="graph_recomputed")


def walk_through(net: Net, ctx: Context) -> list[Check]:
    """The document's single step: forward, MSE, backward, one SGD step; as checks."""
    import copy

    import torch
    import torch.nn.functional as F

    from demos.api import check
    net = copy.deepcopy(net)
    input = torch.randn(1, 1, 32, 32, device=ctx.device)
    target = torch.randn(1, 10, device=ctx.device)
    out = ctx.forward(lambda: net(input), dict(net.named_parameters()))
    loss = F.mse_loss(out, target)
    net.zero_grad()
    before = net.conv1.bias.grad
    loss.backward()
    after = net.conv1.bias.grad
    weight = net.conv1.weight.detach().clone()
    torch.optim.SGD(net.parameters(), lr=0.01).step()
    recomputed(net, input, ctx)
    ctx.log.info("  conv1.bias.grad before backward: %s; after: %s", before,
                 None if after is None else [round(v, 6) for v in after.tolist()])
    return [
        check("conv1.bias.grad is None before backward", before is None, f"{before}"),
        check("conv1.bias.grad is set after backward",
              after is not None and after.shape == (6,) and bool(after.abs().sum() > 0),
              f"shape {None if after is None else tuple(after.shape)}"),
        check("one SGD step changes the weights",
              not torch.equal(weight, net.conv1.weight.detach()),
              f"max change in conv1.weight "
              f"{(weight - net.conv1.weight.detach()).abs().max().item():.3g}"),
    ]


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
                               checkpoint.state(cfg, ctx, net, opt, epoch + 1, t + 1))


def run(cfg: Config, ctx: Context) -> Result:
    import torch

    from demos.api import Interrupted, check, one_line
    from demos.documents.datasets import lenet_images, standardize
    from demos.documents.models import Net

    net = Net().to(ctx.device)
    ctx.log.info("%s", net)
    n_tensors = len(list(net.parameters()))
    n_params = sum(p.numel() for p in net.parameters())
    found = [check("10 parameter tensors", n_tensors == 10, f"{n_tensors} tensors"),
             check("81,194 parameters", n_params == 81194, f"{n_params:,} parameters")]
    found += walk_through(net, ctx)

    g = torch.Generator().manual_seed(ctx.seed)
    x, labels, train, test = lenet_images(cfg.dataset, g, root=cfg.root,
                                          synthetic_size=cfg.synthetic_size,
                                          test_fraction=cfg.test_fraction,
                                          max_images=cfg.max_images)
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
    start = checkpoint.resume(cfg, ctx, net, opt, n_batches, one_line) if cfg.resume else 0
    model = torch.compile(net) if cfg.compile else net  # shares net's parameters

    try:
        train_steps(cfg, ctx, model, opt, x, labels, Shuffles(train, g), test, n_batches,
                    start, net, cfg.batch_size)
    except Interrupted as stop:  # keep what was earned: a checkpoint to resume from, the checks
        ctx.save_state("checkpoint.pt", checkpoint.state(cfg, ctx, net, opt,
                                                         ctx.steps_run // n_batches, ctx.steps_run))
        stop.result = Result(metrics={"parameters": float(n_params)}, checks=found)
        raise
    ctx.save_state("checkpoint.pt", checkpoint.state(cfg, ctx, net, opt, cfg.epochs,
                                                     cfg.epochs * n_batches))
    return finish(cfg, ctx, net, train, n_test, found)


def finish(cfg: Config, ctx: Context, net: Net, train, n_test: int, found: list[Check],
           **extra) -> Result:
    """The accuracy plot and the result, after training."""
    epochs = [row for row in ctx.history() if "test_accuracy" in row]
    ctx.plot("accuracy.png", [r["epoch"] for r in epochs],
             {"test accuracy": [r["test_accuracy"] for r in epochs]},
             title=f"LeNet on {len(train)} {cfg.dataset} images, tested on {n_test}",
             xlabel="epoch", ylabel="test accuracy", logy=False, markers=True)
    n_params = sum(p.numel() for p in net.parameters())
    return Result(
        metrics={"final_loss": ctx.last("loss"), "test_accuracy": ctx.last("test_accuracy"),
                 "parameters": float(n_params)},
        checks=found, **extra)


def run_parallel(cfg: Config, ctx: Context, net: Net, make_optimizer, x, labels, train, test,
                 found: list[Check]) -> Result:
    """Under torchrun: DDP, each rank its slice of every global batch; then the checks that
    make it trustworthy (see demos.documents.parallel). Every rank runs this; rank 0 reports."""
    from demos.api import check, same_everywhere
    from demos.documents.parallel import DDPTraining, flat

    ddp = DDPTraining(cfg, ctx, net, make_optimizer, train)
    train_steps(cfg, ctx, ddp.model, ddp.opt, x, labels, ddp.shuffles, test, ddp.n_batches, 0,
                net, ddp.batch, ddp.sync, ddp.after_step)
    ctx.save_state("checkpoint.pt", checkpoint.state(cfg, ctx, net, ddp.opt, cfg.epochs,
                                                     cfg.epochs * ddp.n_batches))
    same, detail = same_everywhere(ctx.world, flat(net))  # every rank takes part
    inspection = ddp.inspection()
    found.append(check("weights identical on every rank", same, detail))
    if ctx.world.primary:
        found.append(check("DDP equals one process over the first steps",
                           *ddp.compare_with_one_process(x, labels, train)))
    ctx.log.info("  DDP: %s", inspection["DDP"])
    return finish(cfg, ctx, net, train, len(test), found, inspection=inspection)


SCENARIO = Scenario(
    name="lenet", config=Config, run=run, document="004, first example",
    metrics=("final_loss", "test_accuracy", "parameters"),
    files=(*TRAINING_FILES, *graph_files("graph", "graph_recomputed"), "explain.txt",
           "accuracy.png", "checkpoint.pt"),
    dry_run={"epochs": 1}, data_parallel=True)


if __name__ == "__main__":
    run_alone(SCENARIO)
