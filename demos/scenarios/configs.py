"""The typed config of every scenario, with documented defaults that reproduce the documents.

Kept apart from the scenarios' torch code so that `--help`, `--list` and config errors never
import torch. Each class's docstring is its one-line description in `--list`; the scenario's
code is `demos/scenarios/<name>.py`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from demos.lab.config import ScenarioConfig
from demos.lab.schema import ConfigError, param


@dataclass
class LegendreFit(ScenarioConfig):
    """A custom Function for the Legendre polynomial P3 fits sin(x) on [-pi, pi] (doc 003)."""
    points: int = param(2000, "number of x points in linspace(-pi, pi)", ge=2, le=10**8)
    steps: int = param(2000, "SGD steps", ge=1, le=10**9)
    lr: float = param(5e-6, "learning rate of the hand-written SGD", gt=0)
    init: list[float] = param([0.0, -1.0, 0.0, 0.3], "initial a, b, c, d")

    PARAMS: ClassVar = ("a", "b", "c", "d")
    METRICS: ClassVar = ("final_loss",)
    DRY_RUN: ClassVar[dict[str, Any]] = {"steps": 5}

    def validate(self, where: str) -> None:
        super().validate(where)
        if len(self.init) != 4:
            raise ConfigError(f"{where}.init: must list 4 numbers (a, b, c, d), "
                              f"got {len(self.init)}")


@dataclass
class MyReLU(ScenarioConfig):
    """A custom ReLU Function inside a two-layer net trained by hand-written SGD (doc 004)."""
    N: int = param(64, "batch size", ge=1, le=10**7)
    D_in: int = param(1000, "input dimension", ge=1, le=10**7)
    H: int = param(100, "hidden dimension", ge=1, le=10**7)
    D_out: int = param(10, "output dimension", ge=1, le=10**7)
    steps: int = param(500, "SGD steps", ge=1, le=10**9)
    lr: float = param(1e-6, "learning rate of the hand-written SGD", gt=0)

    METRICS: ClassVar = ("final_loss", "initial_loss")
    DRY_RUN: ClassVar[dict[str, Any]] = {"steps": 5}


@dataclass
class MultiplyAdd(ScenarioConfig):
    """A custom w*x + b Function: grads, grad_fn / next_functions, its graph, a short fit (doc 000)."""
    steps: int = param(300, "SGD steps of the fit to w*, b*", ge=1, le=10**9)
    lr: float = param(0.2, "learning rate of the fit", gt=0)
    true_w: list[list[float]] = param([[0.5, -1.0], [2.0, 1.5]], "w* the fit should find (2x2)")
    true_b: list[list[float]] = param([[0.1, 0.2], [-0.3, 0.4]], "b* the fit should find (2x2)")

    PARAMS: ClassVar = tuple(f"{p}[{i},{j}]" for p in "wb" for i in range(2) for j in range(2))
    METRICS: ClassVar = ("final_loss", "w_error", "b_error")
    DRY_RUN: ClassVar[dict[str, Any]] = {"steps": 5}

    def validate(self, where: str) -> None:
        super().validate(where)
        for name in ("true_w", "true_b"):
            value = getattr(self, name)
            if len(value) != 2 or any(len(row) != 2 for row in value):
                raise ConfigError(f"{where}.{name}: must be a 2x2 list like [[1, 2], [3, 4]]")


@dataclass
class LeNet(ScenarioConfig):
    """The LeNet-style CNN as an nn.Module, trained on real handwritten digits (doc 004)."""
    epochs: int = param(15, "passes over the training split", ge=1, le=10**6)
    batch_size: int = param(64, "images per mini-batch", ge=1, le=10**6)
    optimizer: Literal["adam", "sgd"] = param("adam", "torch.optim optimizer")
    lr: float = param(2e-3, "learning rate", gt=0)
    momentum: float = param(0.9, "momentum (sgd only)", ge=0, lt=1)
    test_fraction: float = param(0.2, "share of the images held out for testing", gt=0, lt=1)

    METRICS: ClassVar = ("final_loss", "test_accuracy", "parameters")
    DRY_RUN: ClassVar[dict[str, Any]] = {"epochs": 1}


# name -> typed config; the code of each is demos/scenarios/<name>.py
REGISTRY: dict[str, type[ScenarioConfig]] = {
    "legendre_fit": LegendreFit,
    "my_relu": MyReLU,
    "multiply_add": MultiplyAdd,
    "lenet": LeNet,
}
