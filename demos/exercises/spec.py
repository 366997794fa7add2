"""grading.yaml: how an exercise is graded, the teacher's to edit. Read strictly (yaml.safe_load
through the lab's safe reader; unknown keys refused, each error one line naming file and key)
and written with a comment on every key."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from demos.exercises.table import Exercise, Input
from demos.lab.core.safe_yaml import read_yaml
from demos.lab.core.schema import ConfigError, build, param, render

MAX_ELEMENTS = 1_000_000  # a hidden input's elements


@dataclass
class Points:
    runs: float = param(1.0, "forward and backward run, forward giving the reference's value",
                        ge=0)
    returns: float = param(1.0, "backward returns one gradient (or None) per input, each of "
                                "its input's shape", ge=0)
    gradient: float = param(2.0, "each input that needs a gradient: the reference's on every "
                                 "hidden case", ge=0)
    second: float = param(0.0, "the second derivative (backward's own backward); 0: not asked",
                          ge=0)


@dataclass
class Hidden:
    seeds: list[int] = param([], "each case is graded under each seed")
    shapes: list[dict[str, list[int]]] = param([], "the cases: a shape for each input")


@dataclass
class Grading:
    exercise: str = param("", "the exercise's name")
    function: str = param("", "the class graded, in the submission")
    reference: str = param("", "plain torch: the ground truth, as module:function (a file "
                               "relative to grading.yaml)")
    points: Points = param(Points(), "the points of each check")
    hints: int = param(3, "hint levels shown: 0 none, 1 which input, 2 the kind of mistake, 3 "
                          "the fix", ge=0, le=3)
    inputs: list[Input] = param([], "apply's arguments, in order: normal, or uniform in [low, "
                                    "high]; avoid: kinks")
    hidden: Hidden = param(Hidden(), "what is graded, on random inputs and grad_outputs (not ones)")

    def validate(self, where: str) -> None:
        for key in ("exercise", "function", "reference"):
            if not getattr(self, key):
                raise ConfigError(f"{where}{key}: missing (required)")
        if not self.function.isidentifier():
            raise ConfigError(f"{where}function: a class name, got {self.function!r}")
        if not self.inputs:
            raise ConfigError(f"{where}inputs: at least one input")
        names = [i.name for i in self.inputs]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"{where}inputs[{i}].name: duplicate name '{name}'")
        if not self.hidden.seeds:
            raise ConfigError(f"{where}hidden.seeds: at least one seed")
        if not self.hidden.shapes:
            raise ConfigError(f"{where}hidden.shapes: at least one case")
        for i, case in enumerate(self.hidden.shapes):
            for name in names:
                if name not in case:
                    raise ConfigError(f"{where}hidden.shapes[{i}].{name}: missing (a shape "
                                      f"for each input)")
            for name, shape in case.items():
                if name not in names:
                    raise ConfigError(f"{where}hidden.shapes[{i}].{name}: not an input "
                                      f"(inputs: {', '.join(names)})")
                if any(d < 1 for d in shape):
                    raise ConfigError(f"{where}hidden.shapes[{i}].{name}: each size must be "
                                      f">= 1, got {shape}")
                if math.prod(shape) > MAX_ELEMENTS:
                    raise ConfigError(f"{where}hidden.shapes[{i}].{name}: {shape} is "
                                      f"{math.prod(shape):,} elements; at most {MAX_ELEMENTS:,} "
                                      f"an input (a grade compares whole Jacobian products)")


def read(path: str) -> Grading:
    """grading.yaml, validated; a ConfigError naming the file and the key."""
    raw = read_yaml(path)
    try:
        return build(Grading, raw, "")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def hidden_shapes(inputs: list[Input]) -> list[dict[str, list[int]]]:
    """Two cases of other shapes than the statement's: each size but 1 mapped the same way in
    every input (so sizes that must agree still agree), s -> s + 2 and s -> 2 s + 1."""
    return [{i.name: [d if d == 1 else f(d) for d in (i.shape or [])] for i in inputs}
            for f in (lambda d: d + 2, lambda d: 2 * d + 1)]


def text(e: Exercise, reference: str) -> str:
    """grading.yaml for exercise `e`, each key with its field's help as comment."""
    g = Grading(e.name, e.function, reference, Points(second=2 if e.second else 0),
                inputs=[replace(i, shape=None) for i in e.inputs],  # hidden.shapes has them
                hidden=Hidden([1009, 2027, 3061], hidden_shapes(e.inputs)))
    shows = ", ".join(f"{i.name} {i.shape}" for i in e.inputs)
    return (f"# How `autograd-demos grade exercise.py` grades exercise {e.name}. The teacher's to "
            "edit (keep\n# it from the students); unknown keys are refused. "
            "demos/docs/exercises.md says more.\n"
            + "\n".join(render(g, {"hidden.shapes": f"the statement shows {shows}"})) + "\n")
