"""The documents' Functions as exercises: the class (in its scenario's file), its plain-torch
reference (demos.documents.functions), the inputs the statement shows, and the maths."""
from __future__ import annotations

from dataclasses import dataclass

from demos.lab.core.schema import ConfigError, param


@dataclass
class Input:
    """One tensor argument of apply, float64: random of a shape (normal, or uniform in [low,
    high]), kept at least MARGIN away from each point of `avoid` (a kink)."""
    name: str = param("", "its name (the argument's)")
    shape: list[int] | None = param(None, "the statement's shape (exercise.py's example; "
                                          "grading.yaml's hidden.shapes give the graded ones)")
    low: float | None = param(None, "uniform from low ...")
    high: float | None = param(None, "... to high; neither: normal")
    avoid: list[float] = param([], "kinks the inputs keep away from (by MARGIN)")
    requires_grad: bool = param(True, "whether the input needs a gradient")

    def validate(self, where: str) -> None:
        if not self.name.isidentifier():
            raise ConfigError(f"{where}.name: must be a Python name, got {self.name!r}")
        if (self.low is None) != (self.high is None):
            raise ConfigError(f"{where}: low and high go together")
        if self.low is not None and self.high is not None and not self.low < self.high:
            raise ConfigError(f"{where}: low must be below high, got {self.low}, {self.high}")
        if self.shape is not None and any(d < 1 for d in self.shape):
            raise ConfigError(f"{where}.shape: each size must be >= 1, got {self.shape}")


MARGIN = 0.1  # how far the inputs keep from a kink


@dataclass
class Exercise:
    name: str           # the exercise's name: its scenario's, or a config entry's id
    module: str         # where the class is: a module, or a file
    function: str       # the class's name
    reference: str      # module:function, plain torch
    maths: str          # what forward computes, as the docstring states it
    inputs: list[Input]
    second: bool = False  # whether the second derivative is graded


REFS = "demos.documents.functions"
DOCUMENTS = {e.name: e for e in [
    Exercise("legendre_fit", "demos.scenarios.legendre_fit", "LegendrePolynomial3",
             f"{REFS}:legendre_p3_reference",
             "y = P3(input) = 0.5 * (5 input^3 - 3 input), elementwise: the Legendre "
             "polynomial of degree 3 (document 003, example 2).",
             [Input("input", [5, 3], -1.0, 1.0)]),
    Exercise("my_relu", "demos.scenarios.my_relu", "MyReLU", f"{REFS}:relu_reference",
             "y = max(input, 0), elementwise: the rectified linear unit (document 004). At 0 "
             "either one-sided derivative will do: the grader keeps away from it.",
             [Input("input", [5, 3], avoid=[0.0])]),
    Exercise("multiply_add", "demos.scenarios.multiply_add", "MultiplyAdd",
             f"{REFS}:multiply_add_reference",
             "y = w * x + b, elementwise, w, x and b of one shape (document 000). x needs no "
             "gradient: return None in its place.",
             [Input("w", [2, 2]), Input("x", [2, 2], requires_grad=False), Input("b", [2, 2])]),
    Exercise("my_exp", "demos.scenarios.my_exp", "MyExp", f"{REFS}:exp_reference",
             "y = exp(x), elementwise (document 003, example 1). forward saves its output y "
             "for backward.",
             [Input("x", [5, 3], -2.0, 2.0)]),
    Exercise("linear_function", "demos.scenarios.linear_function", "LinearFunction",
             f"{REFS}:linear_reference",
             "y = input @ weight.T + bias: input (N, in), weight (out, in), bias (out,), y "
             "(N, out) (document 004; torch.nn.functional.linear).",
             [Input("input", [4, 3]), Input("weight", [2, 3]), Input("bias", [2])]),
]}
