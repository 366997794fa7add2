"""What a scenario file imports: `from demos.scenario_api import ...`, the one surface of the
machinery; each name is written once, below.

Importing this module is cheap (no torch): a scenario imports the names it declares itself with
at its top, and the checks inside its `run`, where torch is loaded anyway; those, the names of
the TYPE_CHECKING block, are imported on first use (`lazily`). Measured on 2026-11-27 (2-core
x86_64 VM): `--print-config`, or a config error, of a custom_function config answers in 0.09 s
where torch's import would make it 0.95 s; the registry and --help import this module too.
`run_alone` is what `python -m demos.scenarios.<name>` runs.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

# -- declaring a scenario: its config, what it returns (no torch) ------------------------------
from demos.lab.checks.inputs import (
    InputSpec,  # an argument of a Function's apply, as a config gives it
    make_inputs,  # apply's arguments, made from InputSpecs under a seed
    shape_of,  # the shape of nested lists
)
from demos.lab.core import lazily as _lazily
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
from demos.lab.core.tolerance import (
    FLOAT32_TOL,  # (rtol, atol): float32 against float64
    FLOAT64_TOL,  # (rtol, atol): float64 against float64
)
from demos.lab.core.user_code import (
    Code,  # user code a config names ("file.py:Attr"), with the object itself once loaded
    Supplied,  # a value check_function was handed, itself (a tensor, a tuple)
    claim,  # a name the user's code defines for the whole process (a custom op's), by one file
    load_object,  # the user's module:Attr, loaded
    split_spec,  # "module:Attr" checked and split
)

# -- used inside run(): these import torch, so they load on first use -------------------------
if TYPE_CHECKING:
    from demos.lab.checks import support  # the support matrix: classic_and_twin, matrix, checks
    from demos.lab.checks.diagnose import deliberate  # a gradcheck failing where parity holds
    from demos.lab.checks.gradients import (
        COMPUTES_IN_FLOAT32,  # the check that says a Function computes in float32
        changes_a_leaf,  # whether a Function changes an input in place (mark_dirty)
        check,  # check(name, passed, detail): a Check from a condition
        close,  # close(name, actual, expected, rtol): a Check that two tensors agree
        compare_to_reference,  # parity with tolerances, and its largest errors as metrics
        floating,  # apply's arguments split: floating-point tensors by name, the rest fixed
        gradcheck,  # gradcheck(name, fn, inputs, device, stop=ctx.stop), as a Check
        parity,  # parity(name, custom, reference, inputs, device): same values and gradients
        with_fixed,  # with_fixed(fn, fixed): fn of the floating tensors alone
    )
    from demos.lab.checks.hazards import (
        kept_on_ctx,  # the check that no output or input is kept as a ctx attribute
    )
    from demos.lab.checks.structure import (
        backward_structure,  # what a custom backward returns: a grad per input, shapes, dtypes
        gradgradcheck,  # torch.autograd.gradgradcheck in float64, as a Check
    )
    from demos.lab.checks.ties import (
        restore,  # restore(fixed): the originals back where a callable argument reached them
        ties,  # ties(fixed, given, positions): what a callable argument reaches of the inputs
    )
    from demos.lab.instruments.walk import (
        leaves,  # the leaf tensors an output's graph starts from
        node_name,  # a graph node's name, as the graphs and explain.txt show it
    )
    from demos.lab.runner.context import (
        Context,  # what a scenario gets: ctx.steps(n), ctx.record(...), ctx.graph(...)
        Interrupted,  # raised by ctx.steps on a stop (Ctrl-C): catch it to keep what was earned
    )
    from demos.lab.runner.torchrun import same_everywhere  # under torchrun: one value on all
    from demos.lab.tensors import output_tensors  # a Function's output(s): a tuple of tensors

__getattr__, __dir__, __all__ = _lazily(globals())  # what a scenario file may import


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
