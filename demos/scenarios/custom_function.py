"""custom_function: your own torch.autograd.Function, run, drawn and checked like the others.

The config names the Function (module:Class), optionally a plain-torch reference with the
same inputs, and the inputs. The checks: what backward returns (one grad per input, None
exactly where an input needs none, shapes, dtypes, grad_output untouched, autograd accepts it),
gradcheck (and gradgradcheck with double_backward: true), and parity with the reference for
the value and every input's gradient.

    python runner.py --config configs/examples/cube_ok.yaml
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from demos.scenario_api import (
    FLOAT32_TOL,
    FLOAT64_TOL,
    Capability,
    Check,
    Code,
    ConfigError,
    InputSpec,
    Result,
    Scenario,
    ScenarioConfig,
    Supplied,
    graph_files,
    make_inputs,
    param,
    pass_files,
    run_alone,
    split_spec,
    support_param,
)

if TYPE_CHECKING:
    from demos.scenario_api import Context


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
    rtol: float = param(FLOAT64_TOL[0], "parity: relative tolerance against the reference", ge=0)
    atol: float = param(FLOAT64_TOL[1], "parity: absolute tolerance against the reference", ge=0)
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
    """The entry with its Function (and reference) loaded where the config names it by text,
    once the run starts; checked for what it is. What check_function was given is used as it
    is."""
    import torch
    from torch._library.custom_ops import OPDEFS
    from torch._library.custom_ops import CustomOpDef as OpDef

    from demos.scenario_api import claim, load_object

    for i, spec in enumerate(cfg.inputs):
        if spec.given and not isinstance(spec.value, Supplied):
            raise ConfigError(f"{where}.inputs[{i}].given: only check_function gives a tensor "
                              f"(from Python); a config gives shape or value")
    before, function, reference, mine = dict(OPDEFS), cfg.function, cfg.reference, []
    if function.value is None:
        fn = load_object(function.spec, f"{where}.function")
        if isinstance(fn, OpDef) and OPDEFS.get(fn._qualname) is not fn:
            # another file defined its name since its file loaded (an earlier run): anew
            fn = load_object(function.spec, f"{where}.function", again=True)
        if not (isinstance(fn, type) and issubclass(fn, torch.autograd.Function)
                or isinstance(fn, OpDef)):
            raise ConfigError(f"{where}.function: {function.spec} is not a "
                              f"torch.autograd.Function subclass or a torch.library.custom_op "
                              f"(got {type(fn).__name__})")
        function, mine = Code(function.spec, fn), [fn] if isinstance(fn, OpDef) else []
    if reference is not None and reference.value is None:
        reference = Code(reference.spec, load_object(reference.spec, f"{where}.reference"))
        if not callable(reference.value):
            raise ConfigError(f"{where}.reference: {reference.spec} is not callable")
    for op in [*mine, *(op for q, op in OPDEFS.items() if before.get(q) is not op)]:
        claim(f"the custom op {op._qualname}", op._init_fn.__code__.co_filename,
              f"{where}.function")
    return replace(cfg, function=function, reference=reference)


INTENDED = "backward gives the intended gradient (the reference's)"
TIED = "its callable arguments compute with the checks' tensors"


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


def check_yours(cfg: Config, ctx: Context) -> Result:
    import torch

    from demos.scenario_api import floating, restore, ties

    fn = cfg.function.value
    arguments = make_inputs(cfg.inputs, ctx.seed, ctx.check_device)
    ctx.log.info("  %s with inputs %s", cfg.function.spec, ", ".join(
        f"{k} {tuple(v.shape)}" if isinstance(v, torch.Tensor) else f"{k}={reprlib.repr(v)}"
        for k, v in arguments.items()))
    # the checks differentiate the floating-point tensors; the other arguments stay as given,
    # bound at each call to its copies of the tensors they reach themselves (check_function's)
    inputs, fixed = floating(arguments)
    fixed, untied = ties(fixed, {name: spec.value.value for name, spec in zip(arguments, cfg.inputs)
                                 if spec.tensor and isinstance(spec.value, Supplied)},
                         {name: i for i, name in enumerate(arguments)})
    names = list(arguments)
    tied = [f"{f.name} computes with " + ", ".join(
        f"{names[t.position]} ({t.path})" for t in f.ties) for f in fixed.values() if f.ties]
    if untied:
        return Result(metrics={}, checks=[Check(TIED, False, "; ".join(untied) + (
            ": its gradient cannot be checked on copies; hold it in a list, a module or a "
            "closure variable"))])
    try:
        found, metrics, matrix = checked(cfg, ctx, fn, inputs, fixed)
    finally:
        restore(fixed)
    if tied:
        found.insert(1, Check(TIED, None, "; ".join(tied) + " by itself: each call binds them "
                              "to that call's tensors, as torch's gradcheck perturbs the tensors "
                              "themselves (the originals put back after the checks)"))
    return Result(metrics=metrics, checks=found, support=matrix)


def checked(cfg: Config, ctx: Context, fn: Any, inputs: dict[str, Any],
            fixed: dict[int, Any]) -> tuple[list[Check], dict[str, float], dict[str, Any]]:
    """The checks of check_yours, their metrics and support matrix."""
    import torch

    from demos.scenario_api import (
        COMPUTES_IN_FLOAT32,
        backward_structure,
        changes_a_leaf,
        compare_to_reference,
        deliberate,
        floating,
        gradcheck,
        gradgradcheck,
        kept_on_ctx,
        output_tensors,
        support,
        with_fixed,
    )

    reference = cfg.reference and cfg.reference.value
    op = isinstance(fn, torch.library.CustomOpDef)  # a custom op: called as it is
    copies = changes_a_leaf(fn if op else fn.apply, inputs, fixed, ctx.check_device)
    apply = with_fixed(fn if op else fn.apply, fixed, copies)  # mark_dirty: on copies
    reference = None if reference is None else with_fixed(reference, fixed, copies)
    found = backward_structure(fn, inputs, ctx.check_device, fixed, copies)
    if op:
        found.append(opcheck(fn, make_inputs(cfg.inputs, ctx.seed, ctx.check_device)))
    if any(not c.passed and c.name in ("forward runs", "the output is in the graph",
                                       "backward runs") for c in found):
        return found, {}, {}  # no forward, no graph or no backward: nothing else can run
    if not op:  # what it keeps as ctx attributes (a custom op keeps nothing there)
        found.append(kept_on_ctx(apply, floating(make_inputs(cfg.inputs, ctx.seed,
                                                              ctx.check_device))[0]))
    # drawn and traced before any backward frees what it saved; on inputs of its own, as
    # every check makes its own copies: what a Function does to one reaches no other
    drawn, _ = floating(make_inputs(cfg.inputs, ctx.seed, ctx.check_device))
    outs = output_tensors(ctx.forward(lambda: apply(*drawn.values()), drawn))
    low = any(c.name == COMPUTES_IN_FLOAT32 for c in found)  # judged as float32
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
            inputs, ctx.check_device, rtol=max(cfg.rtol, FLOAT32_TOL[0] if low else 0),
            atol=max(cfg.atol, FLOAT32_TOL[1] if low else 0))
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
    return found, metrics, matrix


SCENARIO = Scenario(
    name="custom_function", config=Config, run=check_yours, document="yours", prepare=prepare,
    metrics=("max_abs_error", "max_rel_error"), files=(*graph_files("graph"), "explain.txt"),
    # with double_backward: true; with a Function that has a jvp
    optional_files=pass_files("second_backward", "forward_mode"))


if __name__ == "__main__":
    run_alone(SCENARIO)
