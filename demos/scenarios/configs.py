"""The typed config of every scenario, with documented defaults that reproduce the documents.

Kept apart from the scenarios' torch code so that `--help`, `--list` and config errors never
import torch. Each class's docstring is its one-line description in `--list`; the scenario's
code is `demos/scenarios/<name>.py`.
"""
from __future__ import annotations

import math
import os
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
    compile: bool = param(False, "run the loss (forward and backward) through torch.compile")

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
    compile: bool = param(False, "run the loss (forward and backward) through torch.compile")

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
    dataset: Literal["digits", "synthetic", "mnist"] = param(
        "digits", "digits (shipped), synthetic (random tensors, quick) or mnist (IDX files)")
    root: str | None = param(None, "mnist: folder with the MNIST IDX files (optionally .gz)")
    max_images: int | None = param(None, "use at most this many train (and test) images",
                                   ge=10, le=10**8)
    synthetic_size: int = param(512, "synthetic: number of random images", ge=10, le=10**7)
    epochs: int = param(15, "passes over the training split", ge=1, le=10**6)
    batch_size: int = param(64, "images per mini-batch", ge=1, le=10**6)
    optimizer: Literal["adam", "sgd"] = param("adam", "torch.optim optimizer")
    lr: float = param(2e-3, "learning rate", gt=0)
    momentum: float = param(0.9, "momentum (sgd only)", ge=0, lt=1)
    test_fraction: float = param(0.2, "share of the images held out for testing", gt=0, lt=1)
    checkpoint_every: int | None = param(None, "also save checkpoint_epoch<N>.pt every N epochs",
                                         ge=1, le=10**6)
    resume: str | None = param(None, "continue from this checkpoint (a .pt saved by lenet)")
    compile: bool = param(False, "run the network through torch.compile")

    METRICS: ClassVar = ("final_loss", "test_accuracy", "parameters")
    DRY_RUN: ClassVar[dict[str, Any]] = {"epochs": 1}

    def validate(self, where: str) -> None:
        super().validate(where)
        if self.resume is not None and not os.path.isfile(self.resume):
            raise ConfigError(f"{where}.resume: {self.resume}: no such checkpoint file")
        if self.dataset != "mnist":
            if self.root is not None:
                raise ConfigError(f"{where}.root: only used with dataset: mnist "
                                  f"(dataset is {self.dataset})")
            return
        if self.root is None:
            raise ConfigError(f"{where}.root: dataset mnist needs root: the folder with "
                              f"train-images-idx3-ubyte and the other MNIST IDX files")
        from demos.datasets import DataError, find_mnist_files
        try:
            find_mnist_files(self.root)
        except DataError as e:
            raise ConfigError(f"{where}.root: {e}") from None


@dataclass
class ComputationGraph(ScenarioConfig):
    """h = w*x + b three ways: x requiring grad, requires_grad=False, .detach() (doc 001)."""
    x: float = param(1.0, "the input x")
    w: float = param(4.0, "the weight w")
    b: float = param(0.5, "the bias b")

    METRICS: ClassVar = ("h",)


@dataclass
class AutogradInternals(ScenarioConfig):
    """How e.backward() reaches the leaves: grad_fn, next_functions, AccumulateGrad (doc 002)."""
    a: float = param(2.0, "the leaf a")
    b: float = param(3.0, "the leaf b")
    d: float = param(4.0, "the leaf d")

    METRICS: ClassVar = ("e", "a_grad", "b_grad", "c_grad_retained", "d_grad")


@dataclass
class MyExp(ScenarioConfig):
    """MyExp, a custom exp that saves its output, against the built-in exp (doc 003)."""
    inputs: list[float] = param([1.0, 2.0, 3.0], "the inputs x")

    METRICS: ClassVar = ("max_grad_error",)

    def validate(self, where: str) -> None:
        super().validate(where)
        if not self.inputs or len(self.inputs) > 10**6 or max(map(abs, self.inputs)) > 80:
            raise ConfigError(f"{where}.inputs: must list 1 to 10**6 numbers with |x| <= 80 "
                              f"(exp overflows float32 beyond 88)")


@dataclass
class LinearFunctionConfig(ScenarioConfig):
    """LinearFunction with needs_input_grad and gradcheck; a Linear module trained on it (doc 004)."""
    N: int = param(256, "samples in the regression", ge=1, le=10**7)
    in_features: int = param(5, "input features", ge=1, le=10**5)
    out_features: int = param(3, "output features", ge=1, le=10**5)
    noise: float = param(0.01, "std of the noise added to the targets", ge=0)
    steps: int = param(300, "SGD steps", ge=1, le=10**9)
    lr: float = param(0.1, "learning rate", gt=0)

    METRICS: ClassVar = ("final_loss", "weight_error", "bias_error")
    DRY_RUN: ClassVar[dict[str, Any]] = {"steps": 5}

@dataclass
class InputSpec:
    """One input tensor of a custom Function: random of a shape, or a given value."""
    name: str | None = param(None, "its name in checks, graphs and reports (default x0, x1, ...)")
    shape: list[int] | None = param(None, "random of this shape: randn under the seed, or "
                                          "uniform in [low, high]")
    low: float | None = param(None, "with shape: uniform from low ...")
    high: float | None = param(None, "... to high (e.g. away from a kink or a pole)")
    value: Any = param(None, "the tensor's value: a number or nested lists of numbers")
    requires_grad: bool = param(True, "whether the input requires grad")

    def validate(self, where: str) -> None:
        if (self.shape is None) == (self.value is None):
            raise ConfigError(f"{where}: give either shape (random) or value, not "
                              f"{'both' if self.shape is not None else 'neither'}")
        if self.shape is not None:
            if any(d < 1 for d in self.shape) or math.prod(self.shape) > 10**5:
                raise ConfigError(f"{where}.shape: dimensions must be >= 1 and at most 100,000 "
                                  f"elements in all (gradcheck's cost grows with them), "
                                  f"got {self.shape}")
            if (self.low is None) != (self.high is None):
                raise ConfigError(f"{where}: give both low and high, or neither")
            if self.low is not None and not self.low < self.high:
                raise ConfigError(f"{where}: low {self.low} must be below high {self.high}")
        else:
            if self.low is not None or self.high is not None:
                raise ConfigError(f"{where}: low/high go with shape, not with value")
            check_numbers(self.value, f"{where}.value")


def check_numbers(value: Any, where: str) -> list[int]:
    """Check a number or rectangular nested lists of finite numbers; return its shape."""
    if isinstance(value, list):
        if not value:
            raise ConfigError(f"{where}: empty list")
        shapes = [check_numbers(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if any(sh != shapes[0] for sh in shapes):
            raise ConfigError(f"{where}: rows of different lengths")
        return [len(value)] + shapes[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    return []


@dataclass
class CustomFunction(ScenarioConfig):
    """Your own torch.autograd.Function: run it, draw its graph, check its backward."""
    function: str = param("", "the Function, as module:Class (module looked up in the config "
                              "file's folder first, then sys.path)")
    reference: str | None = param(None, "optional plain-torch function of the same inputs: "
                                        "the ground truth, as module:function")
    inputs: list[InputSpec] = param([], "the tensors passed to apply, in order")
    double_backward: bool = param(False, "also run gradgradcheck (second derivatives)")
    rtol: float = param(1e-7, "parity: relative tolerance against the reference", ge=0)
    atol: float = param(1e-9, "parity: absolute tolerance against the reference", ge=0)

    METRICS: ClassVar = ("max_abs_error", "max_rel_error")

    def validate(self, where: str) -> None:
        super().validate(where)
        if not self.function:
            raise ConfigError(f"{where}.function: missing (required): the Function as "
                              f"module:Class, e.g. my_ops:MyCube")
        if not self.inputs:
            raise ConfigError(f"{where}.inputs: missing (required): at least one input, "
                              f"e.g. [{{shape: [5, 3]}}]")
        names = [spec.name or f"x{i}" for i, spec in enumerate(self.inputs)]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"{where}.inputs[{i}].name: duplicate name '{name}'")

    def resolve(self, config_dir: str, where: str) -> None:
        """Import the Function (and reference) named in the config; checks their kinds."""
        import torch

        from demos.lab.user_code import import_object

        fn = import_object(self.function, config_dir, f"{where}.function")
        if not (isinstance(fn, type) and issubclass(fn, torch.autograd.Function)):
            raise ConfigError(f"{where}.function: {self.function} is not a "
                              f"torch.autograd.Function subclass (got {type(fn).__name__})")
        self.function_object = fn
        self.reference_object = None
        if self.reference is not None:
            ref = import_object(self.reference, config_dir, f"{where}.reference")
            if not callable(ref):
                raise ConfigError(f"{where}.reference: {self.reference} is not callable")
            self.reference_object = ref


# name -> typed config; the code of each is demos/scenarios/<name>.py
REGISTRY: dict[str, type[ScenarioConfig]] = {
    "legendre_fit": LegendreFit,
    "my_relu": MyReLU,
    "multiply_add": MultiplyAdd,
    "lenet": LeNet,
    "computation_graph": ComputationGraph,
    "autograd_internals": AutogradInternals,
    "my_exp": MyExp,
    "linear_function": LinearFunctionConfig,
    "custom_function": CustomFunction,
}
