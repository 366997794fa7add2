"""What a scenario file imports: `from demos.scenario_api import ...`, the one surface of the
machinery.

Importing this module is cheap (no torch): a scenario imports the names it declares itself with
at its top, and the checks inside its `run`, where torch is loaded anyway; those are imported on
first use (LAZY). Measured on 2026-11-27 (2-core x86_64 VM): `--print-config`, or a config error,
of a custom_function config answers in 0.09 s where torch's import would make it 0.95 s; the
registry and --help import this module too. `run_alone` is what `python -m
demos.scenarios.<name>` runs.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

from demos import lazily

# -- declaring a scenario: its config, what it returns (no torch) ------------------------------
from demos.lab.core.results import (
    Capability,  # a row of the support matrix ("vmap", ...)
    Check,  # one named check: passed, and a one-line detail
    Result,  # what run() returns: metrics, params, checks, ...
)
from demos.lab.core.scenario import (
    TRAINING_FILES,  # the files written for ctx.record's values
    Scenario,  # the declaration at a scenario file's end
    ScenarioConfig,  # base of a scenario's typed Config
    Scenarios,  # the registry of demos/scenarios (its __init__'s, not a scenario's)
    graph_files,  # the files ctx.graph(..., name) writes
    pass_files,  # the files ctx.forward_mode / ctx.second_backward write
    support_param,  # the Config field naming the support rows
)
from demos.lab.core.schema import (
    ConfigError,  # a config problem: one line, exit code 2
    convert,  # a value checked and converted to a type hint
    did_you_mean,  # " (did you mean 'x'?)" for a word not among the choices, or ""
    param,  # a Config field: default, help, bounds
)
from demos.lab.core.text import one_line  # an exception as one short line: "ValueError: ..."
from demos.lab.core.tolerance import FLOAT64  # (rtol, atol): float64 against float64
from demos.lab.core.user_code import (
    Code,  # user code a config names ("file.py:Attr"), with the object itself once loaded
    Given,  # a value check_function was handed, itself (a tensor, a tuple)
    claim,  # a name the user's code defines for the whole process (a custom op's), by one file
    load_object,  # the user's module:Attr, loaded
    split_spec,  # "module:Attr" checked and split
)

# -- used inside run(): these import torch, so they load on first use --------------------------
LAZY = {  # name: (module, attribute), or (module, None) for the module itself
    # what run(cfg, ctx) gets: ctx.steps(n), ctx.record(...), ctx.graph(...), ctx.plot(...)
    "Context": ("demos.lab.runner.context", "Context"),
    # raised by ctx.steps when a stop is asked for (Ctrl-C): catch it to keep what was earned
    "Interrupted": ("demos.lab.runner.context", "Interrupted"),
    # check(name, passed, detail): a Check from a condition
    "check": ("demos.lab.checks.gradients", "check"),
    # close(name, actual, expected, rtol): a Check that two tensors agree
    "close": ("demos.lab.checks.gradients", "close"),
    # gradcheck(name, fn, inputs, device, stop=ctx.stop): torch.autograd.gradcheck in float64,
    # as a Check (with ctx.stop, Ctrl-C ends it at its next evaluation)
    "gradcheck": ("demos.lab.checks.gradients", "gradcheck"),
    # parity(name, custom, reference, inputs, device): same values and gradients, as a Check
    "parity": ("demos.lab.checks.gradients", "parity"),
    # parity with tolerances, and its largest errors as metrics: (Check, metrics)
    "compare_to_reference": ("demos.lab.checks.gradients", "compare_to_reference"),
    # a Function's output, or outputs, as a tuple of tensors
    "output_tensors": ("demos.lab.tensors", "output_tensors"),
    # apply's arguments split: the floating-point tensors by name, the others by position
    "floating": ("demos.lab.checks.gradients", "floating"),
    # with_fixed(fn, fixed): fn of the floating tensors alone, the others put back
    "with_fixed": ("demos.lab.checks.gradients", "with_fixed"),
    # whether a Function changes an input in place (mark_dirty): checked on copies then
    "changes_a_leaf": ("demos.lab.checks.gradients", "changes_a_leaf"),
    # what a custom backward returns (one grad per input, shapes, dtypes): Checks
    "backward_structure": ("demos.lab.checks.structure", "backward_structure"),
    # a failed gradcheck whose parity holds, with the hint that a deliberate gradient needs
    # intended: true
    "deliberate": ("demos.lab.checks.diagnose", "deliberate"),
    # torch.autograd.gradgradcheck in float64, as a Check
    "gradgradcheck": ("demos.lab.checks.structure", "gradgradcheck"),
    # the support matrix: support.classic_and_twin, support.matrix, .checks, .to_json
    "support": ("demos.lab.checks.support", None),
    # the leaf tensors an output's graph starts from
    "leaves": ("demos.lab.instruments.walk", "leaves"),
    # a graph node's name, as the graphs and explain.txt show it (MulBackward0)
    "node_name": ("demos.lab.instruments.walk", "node_name"),
    # under torchrun: whether a tensor is the same on every rank, and the detail
    "same_everywhere": ("demos.lab.runner.torchrun", "same_everywhere"),
}

if TYPE_CHECKING:  # the same names, for type checkers and editors (tests/test_api.py compares)
    from demos.lab.checks import support
    from demos.lab.checks.diagnose import deliberate
    from demos.lab.checks.gradients import (
        changes_a_leaf,
        check,
        close,
        compare_to_reference,
        floating,
        gradcheck,
        parity,
        with_fixed,
    )
    from demos.lab.checks.structure import backward_structure, gradgradcheck
    from demos.lab.instruments.walk import leaves, node_name
    from demos.lab.runner.context import Context, Interrupted
    from demos.lab.runner.torchrun import same_everywhere
    from demos.lab.tensors import output_tensors

__all__ = [  # what a scenario file may import: the names above, LAZY's, and run_alone
    "FLOAT64", "Capability", "Check", "Code", "ConfigError", "Given", "Result", "Scenario",
    "ScenarioConfig", "Scenarios", "TRAINING_FILES", "claim", "convert", "did_you_mean",
    "graph_files", "load_object",
    "one_line", "param", "pass_files", "split_spec", "support_param",
    "Context", "Interrupted", "backward_structure", "check", "close", "compare_to_reference",
    "gradcheck", "gradgradcheck", "leaves", "node_name", "parity", "same_everywhere",
    "support", "output_tensors", "floating", "with_fixed", "changes_a_leaf", "deliberate",
    "run_alone"]
__getattr__, __dir__ = lazily(globals(), LAZY)  # LAZY's names: imported when first used


# the runner's options that need a config file, or more than one run: not for run_alone
NOT_ALONE = ("--config", "--ensemble", "--jobs", "--watch")


def run_alone(scenario: Scenario, argv: list[str] | None = None) -> NoReturn:
    """`python -m demos.scenarios.<name> [options]`: run that one scenario with its shipped
    config (configs/<name>.yaml, its expected values with it), as `runner.py <name>` does, or,
    for a scenario that ships none, on its Config() defaults (a config made in memory); exit
    with the runner's code. The options are the runner's, less those in NOT_ALONE
    (--output-dir, --dry-run, --set, --device, ...)."""
    import inspect
    from pathlib import Path

    from demos.lab.core.results import EXIT_OK, EXIT_USAGE
    from demos.lab.core.signals import leave
    from demos.lab.runner import options, start

    prog = f"python -m demos.scenarios.{scenario.name}"
    typed = sys.argv[1:] if argv is None else argv
    if "-h" in typed or "--help" in typed:
        print(f"usage: {prog} [options]\n\nRuns {scenario.name} once, with its shipped config "
              f"(or on its defaults where it ships none). The options are those of `runner.py "
              f"--help`, less {', '.join(NOT_ALONE)}.")
        sys.exit(EXIT_OK)
    try:
        request = options.parse(typed, prog, [], options.CONFIGS)
        refused = [o for o, given in zip(NOT_ALONE, (request.config, request.ensemble,
                                                     request.jobs != 1 or None,
                                                     request.watch or None)) if given is not None]
        if refused:
            raise ConfigError(f"{refused[0]}: {prog} runs its scenario once, with its shipped "
                              f"config; for {refused[0]}, use runner.py with a config")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    shipped = options.CONFIGS / f"{scenario.name}.yaml"
    own = Path(inspect.getfile(scenario.run)).resolve() == \
        Path(__file__).resolve().parent / "scenarios" / f"{scenario.name}.py"  # the package's
    if own and shipped.is_file():  # its config, as runner.py NAME runs it
        request.config = str(shipped)
    else:
        request.config = f"<{scenario.name} defaults>"
        request.data = {"scenarios": [{"scenario": scenario.name}]}
    leave(start.main(typed, lambda: {scenario.name: scenario}, prog, request=request))
