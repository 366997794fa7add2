"""lenet: the document's LeNet-style CNN as an nn.Module, trained on real handwritten digits.

Document 004, first example (PyTorch's "Neural Networks" tutorial of its time): conv 1->6 3x3,
conv 6->16 3x3 (each ReLU + 2x2 max-pool), fc 16*6*6 -> 120 -> 84 -> 10, input 1x32x32. The
tutorial's code comes first: its Net, its one-step walk-through (a random input, MSE against a
random target, backward, one SGD step) as `walk_through`, then the loop that trains it on the
digits, written as pytorch/examples' mnist writes one (`data`, `train`). The lab's hooks end in
`# lab: ...`; everything the lab adds (the config, the checks, the accuracy plot) is below
"The lab". The data is demos/documents/datasets.py's (the shipped 8x8 digits upscaled to 32x32,
or MNIST's 28x28 padded to 32x32, as LeNet-5 did). Data-parallel training under torchrun is
`lenet_ddp`.

    python runner.py --config configs/lenet.yaml
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from demos.documents.datasets import (
    DataError,
    Shuffles,
    find_mnist_files,
    lenet_images,
    standardize,
)
from demos.scenario_api import (
    TRAINING_FILES,
    ConfigError,
    Result,
    Scenario,
    ScenarioConfig,
    graph_files,
    param,
    run_alone,
)

if TYPE_CHECKING:
    from demos.scenario_api import Check, Context

# == The tutorial ================================================================================


class Net(nn.Module):

    def __init__(self):
        super().__init__()
        # 1 input image channel, 6 output channels, 3x3 square convolution kernel
        self.conv1 = nn.Conv2d(1, 6, 3)
        self.conv2 = nn.Conv2d(6, 16, 3)
        # an affine operation: y = Wx + b
        self.fc1 = nn.Linear(16 * 6 * 6, 120)  # 6*6 from image dimension
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):                           # (B, 1, 32, 32)
        # Max pooling over a (2, 2) window
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (B, 6, 15, 15)
        # If the size is a square you can only specify a single number
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (B, 16, 6, 6)
        x = torch.flatten(x, 1)                     # (B, 576)
        x = F.relu(self.fc1(x))                     # (B, 120)
        x = F.relu(self.fc2(x))                     # (B, 84)
        return self.fc3(x)                          # (B, 10)


def walk_through(ctx: Context) -> dict[str, Any]:
    """The tutorial's one step on a new Net: what the checks read of it (the tutorial prints
    it), with the net and its input."""
    net = Net().to(ctx.device)
    params = list(net.parameters())

    input = torch.randn(1, 1, 32, 32, device=ctx.device)
    out = ctx.forward(lambda: net(input), dict(net.named_parameters()))  # lab: drawn, traced

    target = torch.randn(10, device=ctx.device)  # a dummy target, for example
    target = target.view(1, -1)  # make it the same shape as output
    criterion = nn.MSELoss()
    loss = criterion(out, target)

    net.zero_grad()     # zeroes the gradient buffers of all parameters
    before = net.conv1.bias.grad  # conv1.bias.grad before backward: None
    loss.backward()
    after = net.conv1.bias.grad   # conv1.bias.grad after backward: six numbers

    weight = net.conv1.weight.detach().clone()  # lab: to see the step change it
    # create your optimizer
    optimizer = optim.SGD(net.parameters(), lr=0.01)
    optimizer.step()    # Does the update

    return {"net": net, "input": input, "params": params, "before": before, "after": after,
            "weight": weight}


def test_accuracy(net, images, labels, test_ids, chunk=1024):
    """The share of test images classified right, `chunk` images per forward pass."""
    with torch.no_grad():
        right = sum((net(images[c]).argmax(1) == labels[c]).sum() for c in test_ids.split(chunk))
    return right.float() / len(test_ids)


def setup(cfg: Config, ctx: Context) -> tuple[Any, ...]:
    """The digits (standardized), their labels, the train and test indices into them and each
    epoch's shuffled order of the training images, on the device; the Net and its optimizer."""
    g = torch.Generator().manual_seed(ctx.seed)
    images, labels, train_ids, test_ids = lenet_images(
        cfg.dataset, g, root=cfg.root, synthetic_size=cfg.synthetic_size,
        test_fraction=cfg.test_fraction, max_images=cfg.max_images)
    images = standardize(images, train_ids).to(ctx.device)
    labels = labels.to(ctx.device)
    train_ids, test_ids = train_ids.to(ctx.device), test_ids.to(ctx.device)
    shuffles = Shuffles(train_ids, g)

    net = Net().to(ctx.device)
    optimizer = optim.Adam(net.parameters(), lr=cfg.lr)
    if cfg.optimizer == "sgd":  # lab: the config's other optimizer
        optimizer = optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum)  # lab: sgd
    return images, labels, train_ids, test_ids, shuffles, net, optimizer


def train(cfg: Config, ctx: Context, net: Net, optimizer: optim.Optimizer, images, labels,
          train_ids, test_ids, shuffles: Shuffles) -> None:
    """The training loop: a mini-batch per step, the test accuracy after each epoch."""
    n_batches = -(-len(train_ids) // cfg.batch_size)
    for t in ctx.steps(cfg.epochs * n_batches):  # lab: every epoch's batches
        epoch, i = divmod(t, n_batches)
        batch = shuffles(epoch)[i * cfg.batch_size:(i + 1) * cfg.batch_size]

        optimizer.zero_grad()
        output = net(images[batch])
        loss = F.cross_entropy(output, labels[batch])
        loss.backward()
        optimizer.step()
        ctx.record(t, loss=loss)  # lab: the loss curve

        if i == n_batches - 1:  # the epoch's end: the share of test images it gets right
            accuracy = test_accuracy(net, images, labels, test_ids)
            ctx.record(t, always=True, epoch=epoch + 1, test_accuracy=accuracy)  # lab: a curve


# == The lab: what the runner adds to the tutorial ===============================================


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
    compile: bool = param(False, "run the network through torch.compile")

    def validate(self, where: str) -> None:
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


def walked(ctx: Context) -> list[Check]:
    """The tutorial's walk-through, on the side: it draws from the random generator nothing
    training does (so the trained Net starts from the weights it would alone). Its checks:
    the Net's parameters, and what backward and the step did; its graph beside the same
    forward under activation checkpointing (see `recomputed`)."""
    from demos.scenario_api import check

    devices = [ctx.device] if ctx.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        seen = walk_through(ctx)
    net, before, after, weight = seen["net"], seen["before"], seen["after"], seen["weight"]
    recomputed(net, seen["input"], ctx)
    ctx.log.info("%s", net)
    ctx.log.info("  conv1.bias.grad before backward: %s; after: %s", before,
                 None if after is None else [round(v, 6) for v in after.tolist()])
    n_tensors, n_params = len(seen["params"]), sum(p.numel() for p in seen["params"])
    return [
        check("10 parameter tensors", n_tensors == 10, f"{n_tensors} tensors"),
        check("81,194 parameters", n_params == 81194, f"{n_params:,} parameters"),
        check("conv1.bias.grad is None before backward", before is None, f"{before}"),
        check("conv1.bias.grad is set after backward",
              after is not None and after.shape == (6,) and bool(after.abs().sum() > 0),
              f"shape {None if after is None else tuple(after.shape)}"),
        check("one SGD step changes the weights",
              not torch.equal(weight, net.conv1.weight.detach()),
              f"max change in conv1.weight "
              f"{(weight - net.conv1.weight.detach()).abs().max().item():.3g}"),
    ]


def recomputed(net: Net, input: Any, ctx: Context) -> None:
    """Beside the walk-through's graph, the same forward under activation checkpointing
    (recomputation): backward keeps only the net's input and runs the forward again, where the
    plain graph keeps every layer's activations. The two ledgers of what backward keeps (in
    explain.txt) show the trade."""
    from torch.utils.checkpoint import checkpoint as recompute

    leaf = input.detach().clone().requires_grad_()  # checkpoint needs an input that does
    ctx.forward(lambda: recompute(net, leaf, use_reentrant=True),
                {"input": leaf, **dict(net.named_parameters())}, name="graph_recomputed")


def train_and_test(cfg: Config, ctx: Context) -> Result:
    from demos.scenario_api import Interrupted

    found = walked(ctx)
    images, labels, train_ids, test_ids, shuffles, net, optimizer = setup(cfg, ctx)
    model = torch.compile(net) if cfg.compile else net  # shares net's parameters
    try:
        train(cfg, ctx, model, optimizer, images, labels, train_ids, test_ids, shuffles)
    except Interrupted as stop:  # keep what was earned: the checks of the walk-through
        stop.result = Result(metrics={"parameters": parameters(net)}, checks=found)
        raise
    return finish(cfg, ctx, net, train_ids, len(test_ids), found)


def parameters(net: nn.Module) -> float:
    return float(sum(p.numel() for p in net.parameters()))


def finish(cfg: Config, ctx: Context, net: Net, train_ids, n_test: int, found: list[Check],
           **extra) -> Result:
    """The accuracy plot and the result, after training."""
    epochs = [row for row in ctx.history() if "test_accuracy" in row]
    ctx.plot("accuracy.png", [r["epoch"] for r in epochs],
             {"test accuracy": [r["test_accuracy"] for r in epochs]},
             title=f"LeNet on {len(train_ids)} {cfg.dataset} images, tested on {n_test}",
             xlabel="epoch", ylabel="test accuracy", logy=False, markers=True)
    return Result(
        metrics={"final_loss": ctx.last("loss"), "test_accuracy": ctx.last("test_accuracy"),
                 "parameters": parameters(net)},
        checks=found, **extra)


SCENARIO = Scenario(
    name="lenet", config=Config, run=train_and_test, document="004, first example",
    metrics=("final_loss", "test_accuracy", "parameters"),
    files=(*TRAINING_FILES, *graph_files("graph", "graph_recomputed"), "explain.txt",
           "accuracy.png"),
    dry_run={"epochs": 1})


if __name__ == "__main__":
    run_alone(SCENARIO)
