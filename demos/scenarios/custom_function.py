"""custom_function: your own torch.autograd.Function, run, drawn and checked like the others.

The config names the Function (module:Class), optionally a plain-torch reference with the
same inputs, and the inputs. The checks: what backward returns (one grad per input, None
exactly where an input needs none, shapes, dtypes, grad_output untouched, autograd accepts it),
gradcheck (and gradgradcheck with double_backward: true), and parity with the reference for
the value and every input's gradient.

    python runner.py --config configs/examples/cube_ok.yaml
"""
from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from demos.scenario_api import (
    FLOAT64,
    Capability,
    Check,
    Code,
    ConfigError,
    Given,
    Result,
    Scenario,
    ScenarioConfig,
    convert,
    did_you_mean,
    graph_files,
    param,
    pass_files,
    run_alone,
    split_spec,
    support_param,
)

if TYPE_CHECKING:
    import torch

    from demos.scenario_api import Context


TENSOR_DTYPES = ("float64", "float32", "int64", "int32", "int16", "int8", "uint8", "bool")
# what an integer or bool tensor holds: (lowest, highest)
RANGES = {"int64": (-2**63, 2**63 - 1), "int32": (-2**31, 2**31 - 1), "int16": (-2**15, 2**15 - 1),
          "int8": (-128, 127), "uint8": (0, 255), "bool": (0, 1),
          "float32": (-3.4028234663852886e38, 3.4028234663852886e38)}


@dataclass
class InputSpec:
    """One argument of a custom Function's apply: a tensor, random of a shape or of a given
    value; or, with tensor: false, a Python value passed as it is (a dim, an index tuple, None)."""
    name: str | None = param(None, "its name in checks, graphs and reports (default x0, x1, ...)")
    shape: list[int] | None = param(None, "random of this shape: randn under the seed, or "
                                          "uniform in [low, high]")
    low: float | None = param(None, "with shape: uniform from low ...")
    high: float | None = param(None, "... to high (e.g. away from a kink or a pole)")
    value: Any = param(None, "the tensor's value: a number or nested lists of numbers; with "
                             "tensor: false, the Python value itself (a list is passed as a "
                             "tuple; null is None)")
    requires_grad: bool = param(True, "whether the input requires grad (a floating-point "
                                      "tensor only)")
    dtype: str = param("float64", "the tensor's dtype: " + ", ".join(TENSOR_DTYPES) + " (an "
                                  "integer or bool tensor, e.g. indices, needs a value and "
                                  "requires no grad; a floating one is checked in float64)")
    tensor: bool = param(True, "false: `value` is passed to apply as it is, not as a tensor")
    given: bool = param(False, "check_function's record of a tensor it was given: its shape "
                               "and dtype (the run uses the tensor itself); with tensor: "
                               "false, of a long or unusual value: what it is")

    def validate(self, where: str) -> None:
        if self.name is not None and not (self.name.isprintable() and 0 < len(self.name) <= 40):
            raise ConfigError(f"{where}.name: a label of 1 to 40 printable characters (no "
                              f"newline or control character), got {self.name!r}")
        if not self.tensor:
            given = [k for k in ("shape", "low", "high") if getattr(self, k) is not None]
            if given or self.dtype != "float64":
                raise ConfigError(f"{where}: tensor: false passes `value` as it is; "
                                  f"{(given or ['dtype'])[0]} is for a tensor")
            self.value = python_value(self.value)
            self.requires_grad = False
            return
        if self.dtype not in TENSOR_DTYPES:
            raise ConfigError(f"{where}.dtype: {self.dtype!r} is not a dtype an input may "
                              f"have{did_you_mean(self.dtype, TENSOR_DTYPES)}")
        if self.given:  # check_function's record: the tensor itself is used
            return
        if not self.dtype.startswith("float"):
            if self.value is None:
                raise ConfigError(f"{where}: {an(self.dtype)} tensor needs its value (indices, a "
                                  f"mask): value: [...]")
            self.requires_grad = False  # only floating-point tensors can require grad
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
            if self.low is not None and not math.isfinite(self.high - self.low):
                raise ConfigError(f"{where}.high: [low, high] = [{self.low:g}, {self.high:g}] "
                                  f"is wider than a float64 holds (high - low overflows: every "
                                  f"input would be inf or nan); narrow it")
        else:
            if self.low is not None or self.high is not None:
                raise ConfigError(f"{where}: low/high go with shape, not with value")
            self.value = numbers(self.value, f"{where}.value")
            if math.prod(shape_of(self.value)) > 10**5:
                raise ConfigError(f"{where}.value: at most 100,000 numbers, as for shape "
                                  f"(gradcheck's cost grows with them), got "
                                  f"{math.prod(shape_of(self.value)):,}; pass check_function "
                                  f"the tensor itself")
            self.value = held(self.value, f"{where}.value", self.dtype)


def an(dtype: str) -> str:
    return ("an " if dtype.startswith("int") else "a ") + dtype


def held(value: Any, where: str, dtype: str) -> Any:
    """A tensor's numbers as its dtype holds them (ints for an integer or bool one); a
    ConfigError naming one that it cannot hold."""
    if isinstance(value, list):
        return [held(v, f"{where}[{i}]", dtype) for i, v in enumerate(value)]
    low, high = RANGES.get(dtype, (-math.inf, math.inf))
    floating = dtype.startswith("float")
    if not (floating or float(value).is_integer()) or not low <= value <= high:
        raise ConfigError(f"{where}: {value:g} in {an(dtype)} tensor; give " + (
            "0 or 1 (false, true)" if dtype == "bool" else f"numbers from {low:g} to {high:g}"
            if floating else f"whole numbers from {low} to {high}"))
    return value if floating else int(value)


def python_value(value: Any) -> Any:
    """A config's value as apply gets it: lists become tuples (an index, a size), inside too."""
    return tuple(python_value(v) for v in value) if isinstance(value, list) else value


def numbers(value: Any, where: str) -> Any:
    """A number or rectangular nested lists of finite numbers, as floats (`5e-6` included,
    which YAML reads as a string); a ConfigError naming the element otherwise."""
    if isinstance(value, list):
        if not value:
            raise ConfigError(f"{where}: empty list")
        rows = [numbers(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if any(shape_of(r) != shape_of(rows[0]) for r in rows):
            raise ConfigError(f"{where}: rows of different lengths")
        return rows
    try:
        return convert(float, value, where)
    except ConfigError:
        raise ConfigError(f"{where}: must be a finite number, got {value!r}") from None


def shape_of(value: Any) -> list[int]:
    return [len(value), *shape_of(value[0])] if isinstance(value, list) else []


@dataclass
class Config(ScenarioConfig):
    """Your own torch.autograd.Function or custom op: run it, draw its graph, check its
    backward."""
    function: Code = param(Code(""), "the Function (or a torch.library.custom_op), as "
                                     "file.py:Class or module:Class (a file beside the config, "
                                     "or an installed module)", path="code", required=True)
    reference: Code | None = param(None, "optional plain-torch function of the same inputs: "
                                         "the ground truth, as file.py:function or "
                                         "module:function", path="code")
    inputs: list[InputSpec] = param([], "the tensors passed to apply, in order", required=True)
    double_backward: bool = param(False, "also run gradgradcheck, and draw, trace and check "
                                         "the second backward (second derivatives)")
    intended: bool = param(False, "the backward is deliberately not the forward's derivative "
                                  "(a gradient reversal layer, a straight-through estimator): "
                                  "the reference's autograd gives the intended gradient, and "
                                  "every check compares with it, gradcheck's finite "
                                  "differences nowhere")
    rtol: float = param(FLOAT64[0], "parity: relative tolerance against the reference", ge=0)
    atol: float = param(FLOAT64[1], "parity: absolute tolerance against the reference", ge=0)
    support: list[Capability] = support_param(every_row=True)
    require: list[Capability] = param([], "capabilities that must be ok: an unsupported one "
                                          "among them is a failed check of its own (a row "
                                          "that fails always fails a check)")

    def validate(self, where: str) -> None:
        if not self.function.spec:
            raise ConfigError(f"{where}.function: missing (required): the Function as "
                              f"module:Class, e.g. my_ops:MyCube")
        split_spec(self.function.spec, f"{where}.function")
        if self.reference is not None:
            split_spec(self.reference.spec, f"{where}.reference")
        if not self.inputs:
            raise ConfigError(f"{where}.inputs: must list at least one input, "
                              f"e.g. [{{shape: [5, 3]}}]")
        if self.intended and self.reference is None:
            raise ConfigError(f"{where}.intended: needs a reference whose autograd gives the "
                              f"intended gradient (e.g. x + (x.round() - x).detach() for a "
                              f"straight-through round)")
        for i, name in enumerate(self.require):
            if name not in self.support:
                raise ConfigError(f"{where}.require[{i}]: {name} is required but not in "
                                  f"support, so it would not run")
        names = [spec.name or f"x{i}" for i, spec in enumerate(self.inputs)]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"{where}.inputs[{i}].name: duplicate name '{name}'")


def prepare(cfg: Config, where: str) -> Config:
    """The entry with its Function (and reference) loaded, once the run starts; checked for
    what they are. The objects check_function was given are used as they are."""
    import torch
    from torch._library.custom_ops import OPDEFS

    from demos.scenario_api import claim, load_object

    for i, spec in enumerate(cfg.inputs):
        if spec.given and not isinstance(spec.value, Given):
            raise ConfigError(f"{where}.inputs[{i}].given: only check_function gives a tensor "
                              f"(from Python); a config gives shape or value")
    if cfg.function.value is not None:
        return cfg
    before = dict(OPDEFS)
    spec, ref = cfg.function.spec, cfg.reference and cfg.reference.spec
    fn = load_object(spec, f"{where}.function")
    if isinstance(fn, torch.library.CustomOpDef) and OPDEFS.get(fn._qualname) is not fn:
        # another file defined its name since its file loaded (an earlier run): it loads anew
        fn = load_object(spec, f"{where}.function", again=True)
    if not (isinstance(fn, type) and issubclass(fn, torch.autograd.Function)
            or isinstance(fn, torch.library.CustomOpDef)):
        raise ConfigError(f"{where}.function: {spec} is not a torch.autograd.Function "
                          f"subclass or a torch.library.custom_op (got {type(fn).__name__})")
    reference = None if ref is None else load_object(ref, f"{where}.reference")
    if ref is not None and not callable(reference):
        raise ConfigError(f"{where}.reference: {ref} is not callable")
    mine = [fn] if isinstance(fn, torch.library.CustomOpDef) else []
    for op in [*mine, *(op for q, op in OPDEFS.items() if before.get(q) is not op)]:
        claim(f"the custom op {op._qualname}", op._init_fn.__code__.co_filename,
              f"{where}.function")
    return replace(cfg, function=Code(spec, fn), reference=ref and Code(ref, reference))


def make_inputs(cfg: Config, seed: int, device: torch.device) -> dict[str, Any]:
    """apply's arguments, by name, in order: floating-point tensors in float64 (random under
    the seed, of the given values, or copies of the tensors given to check_function), integer
    and bool tensors of their dtype, and the values that are not tensors as they are."""
    import torch

    g = torch.Generator().manual_seed(seed)
    inputs: dict[str, Any] = {}
    for i, spec in enumerate(cfg.inputs):
        name, given = spec.name or f"x{i}", spec.value
        if not spec.tensor:  # a value, as given (check_function's, itself)
            inputs[name] = given.value if isinstance(given, Given) else given
            continue
        dtype = getattr(torch, spec.dtype) if not spec.dtype.startswith("float") \
            else torch.float64
        if isinstance(given, Given):  # check_function's tensor, copied: the caller's stays
            x = given.value.detach().to(dtype=dtype, copy=True)
        elif spec.value is not None:
            x = torch.tensor(spec.value, dtype=dtype)
        elif spec.low is not None:
            x = spec.low + (spec.high - spec.low) * torch.rand(spec.shape, generator=g,
                                                               dtype=torch.float64)
        else:
            x = torch.randn(spec.shape, generator=g, dtype=torch.float64)
        inputs[name] = x.to(device).requires_grad_(spec.requires_grad and x.is_floating_point())
    return inputs


INTENDED = "backward gives the intended gradient (the reference's)"


def opcheck(op: Any, arguments: dict[str, Any]) -> Check:
    """torch.library.opcheck of a custom op at these arguments (make_inputs', its own): its
    schema, its autograd registration, its fake (meta) kernel and AOT dispatch. It does not
    test that the gradients are right: gradcheck and parity do."""
    import torch

    from demos.scenario_api import check, one_line

    try:
        results = torch.library.opcheck(op, tuple(arguments.values()))
    except Exception as e:
        return check("opcheck", False, one_line(e))
    failed = [k for k, v in results.items() if v != "SUCCESS"]
    return check("opcheck", not failed, "; ".join(f"{k}: {results[k]}" for k in failed) or
                 f"{', '.join(results)}: passed (torch.library.opcheck: the op's registration, "
                 f"not its gradients' values)")


def run(cfg: Config, ctx: Context) -> Result:
    import torch

    from demos.scenario_api import (
        backward_structure,
        changes_a_leaf,
        compare_to_reference,
        deliberate,
        floating,
        gradcheck,
        gradgradcheck,
        output_tensors,
        support,
        with_fixed,
    )

    fn, reference = cfg.function.value, cfg.reference and cfg.reference.value
    arguments = make_inputs(cfg, ctx.seed, ctx.check_device)
    ctx.log.info("  %s with inputs %s", cfg.function.spec, ", ".join(
        f"{k} {tuple(v.shape)}" if isinstance(v, torch.Tensor) else f"{k}={reprlib.repr(v)}"
        for k, v in arguments.items()))
    # the checks differentiate the floating-point tensors; the other arguments stay as given
    inputs, fixed = floating(arguments)
    op = isinstance(fn, torch.library.CustomOpDef)  # a custom op: called as it is
    copies = changes_a_leaf(fn if op else fn.apply, inputs, fixed, ctx.check_device)
    apply = with_fixed(fn if op else fn.apply, fixed, copies)  # mark_dirty: on copies
    reference = None if reference is None else with_fixed(reference, fixed, copies)
    found = backward_structure(fn, inputs, ctx.check_device, fixed, copies)
    if op:
        found.append(opcheck(fn, make_inputs(cfg, ctx.seed, ctx.check_device)))
    if any(not c.passed and c.name in ("forward runs", "the output is in the graph",
                                       "backward runs") for c in found):
        return Result(metrics={}, checks=found)  # no forward, no graph or no backward:
        #                                          nothing else can run
    # drawn and traced before any backward frees what it saved; on inputs of its own, as
    # every check makes its own copies: what a Function does to one reaches no other
    drawn, _ = floating(make_inputs(cfg, ctx.seed, ctx.check_device))
    outs = output_tensors(ctx.forward(lambda: apply(*drawn.values()), drawn))
    low = any(c.name == support.COMPUTES_IN_FLOAT32 for c in found)  # judged as float32
    if not cfg.intended:  # an intended gradient is checked by parity with the reference
        found.append(gradcheck("gradcheck", apply, inputs, ctx.check_device, ctx.stop, low))
    if cfg.double_backward:
        found.append(gradgradcheck("gradgradcheck", apply, inputs, ctx.check_device,
                                   ctx.stop, low))
        if all(t.layout == torch.strided for t in (*inputs.values(), *outs)):
            ctx.second_backward(apply, inputs, reference)  # drawn, traced, checked
        else:  # sparse: gradgradcheck holds it as torch's does
            found.append(Check("second backward agrees", None, "not drawn: dense tensors only"))
    if not op and getattr(fn, "jvp", None) is not getattr(torch.autograd.Function, "jvp", None):
        ctx.forward_mode(apply, inputs)  # it has a jvp: forward mode, step by step
    metrics = {}
    if reference is not None:
        check, metrics = compare_to_reference(
            INTENDED if cfg.intended else "parity with the reference", apply, reference,
            inputs, ctx.check_device, rtol=max(cfg.rtol, support.FLOAT32[0] if low else 0),
            atol=max(cfg.atol, support.FLOAT32[1] if low else 0))
        found.append(check)
        if check.passed and not cfg.intended:  # gradcheck fails where the reference agrees
            found = [deliberate(c) if c.name == "gradcheck" and c.passed is False else c
                     for c in found]
    matrix = {}
    if cfg.support:
        rows = support.matrix(apply, inputs, reference, ctx.check_device, rows=cfg.support,
                              intended=cfg.intended, float32=low, name=cfg.id)
        ran = {"backward": INTENDED if cfg.intended else "gradcheck"} | (
            {"double_backward": "gradgradcheck"} if cfg.double_backward else {})
        found += support.checks(rows, cfg.require, done=ran)
        matrix = {fn._qualname if op else fn.__name__: rows}
    return Result(metrics=metrics, checks=found, support=matrix)


SCENARIO = Scenario(
    name="custom_function", config=Config, run=run, document="yours", prepare=prepare,
    metrics=("max_abs_error", "max_rel_error"), files=(*graph_files("graph"), "explain.txt"),
    # with double_backward: true; with a Function that has a jvp
    optional_files=pass_files("second_backward", "forward_mode"))


if __name__ == "__main__":
    run_alone(SCENARIO)
