"""The Python API, the command line's equal for notebooks and scripts (`from demos import run`).

    from demos import run, check_function
    r = run("legendre_fit", lr=1e-5)        # configs/legendre_fit.yaml with one key changed
    r.passed, r.folder, r["legendre_fit"].metrics
    r                                       # in a notebook: the run's report, inline

Each call is one run of the runner (`runner.py run --config ...`) in this process: the same
run folder, summary.json, report and index, the same checks and exit status (`exit_code`). A
config error raises ConfigError with the command line's one-line message, before anything runs.
Nothing is left behind in the caller's process: the run's signal handler is in place only while
it runs (Ctrl-C stops it at the next step boundary, keeps what was done, and raises
RunInterrupted; Ctrl-C again raises at once), and torch's settings, the random number
generators, the working directory and the environment are as they were. Nothing here calls
sys.exit.

The results are typed (RunResult, EntryResult, GraphView, SupportView, Comparison) and each
has a `_repr_html_`: the report's own HTML, shown in the notebook's output.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from demos.lab.core.layout import BACKWARD, CONFIG, GRADS, REPORT, SUMMARY
from demos.lab.core.results import EXIT_INTERRUPTED, Check, EntrySummary, RunSummary
from demos.lab.core.schema import ConfigError

PROG = "runner.py"  # the command a run records: the one that runs it again from a shell


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (a notebook's interrupt) stopped a run at a step boundary; its folder is whole
    (summary.json status "interrupted", the report) and `result` holds it."""

    def __init__(self, result: RunResult):
        super().__init__(f"interrupted: what was done is in {result.folder}")
        self.result = result


# -- the results ---------------------------------------------------------------------------


@dataclass
class GraphView:
    """An autograd graph of an entry: its drawing, and its stepper where it was traced."""
    entry: EntryResult
    name: str  # the file stem: <name>.svg, .pdf, .gv

    @property
    def files(self) -> list[Path]:
        """Its drawings in the entry's folder (the graph, then with its gradients)."""
        return [self.entry.folder / f"{self.name}{kind}{ext}" for kind in ("", GRADS)
                for ext in (".svg", ".pdf", ".gv")
                if (self.entry.folder / f"{self.name}{kind}{ext}").is_file()]

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The stepper's steps (backward.json), one per node; [] when it was not traced."""
        from demos.lab.pages.report import backward_traces
        return backward_traces(self.entry.folder).get(self.name, [])

    def _repr_html_(self) -> str:
        from demos.lab.pages import inline, report
        from demos.lab.pages.templating import render
        e = self.entry
        found = [g for g in report.graphs(e.folder, e.id, e.files) if g.stem == self.name]
        if not found:
            return f"<p>{e.id} has no graph {self.name} (no {self.name}.svg)</p>"
        return inline.view(render("graph.html.j2", graph=found[0], e=e.summary),
                           e.run.folder)

    def __repr__(self) -> str:
        return f"<graph {self.name} of {self.entry.id}: {len(self.steps)} traced steps>"


@dataclass
class SupportView:
    """A support matrix: {Function: {capability: {"status", "detail"}}}."""
    data: dict[str, dict[str, dict[str, str]]]

    def status(self, function: str, capability: str) -> str:
        """ok, unsupported, fails or skipped."""
        return self.data[function][capability]["status"]

    def _repr_html_(self) -> str:
        from demos.lab.pages import inline
        from demos.lab.pages.report import support_matrix
        from demos.lab.pages.templating import render
        return inline.view(render("support.html.j2", support=support_matrix(self.data)), None)

    def __repr__(self) -> str:
        return "\n".join(f"{f}: " + ", ".join(f"{c} {row['status']}" for c, row in rows.items())
                         for f, rows in self.data.items())


@dataclass
class EntryResult:
    """One scenario entry of a run, as summary.json's `scenarios[i]`, with its folder."""
    run: RunResult
    summary: EntrySummary

    id = property(lambda self: self.summary.id)
    scenario = property(lambda self: self.summary.scenario)
    status = property(lambda self: self.summary.status)
    metrics = property(lambda self: self.summary.metrics)
    params = property(lambda self: self.summary.params)
    checks = property(lambda self: self.summary.checks)
    inspection = property(lambda self: self.summary.inspection)
    error = property(lambda self: self.summary.error)

    @property
    def passed(self) -> bool:
        return self.summary.status == "passed"

    @property
    def failures(self) -> list[Check]:
        return self.summary.failures

    @property
    def folder(self) -> Path:
        return self.run.folder / self.id

    @property
    def files(self) -> list[str]:
        try:
            return sorted(p.name for p in self.folder.iterdir()
                          if p.is_file() and not p.name.startswith("."))
        except OSError:
            return []

    @property
    def graphs(self) -> dict[str, GraphView]:
        """Its autograd graphs by name (the .svg files drawn), each with its stepper."""
        return {f[:-4]: GraphView(self, f[:-4]) for f in self.files
                if f.endswith(".svg") and not f.endswith(f"{GRADS}.svg")}

    @property
    def support(self) -> SupportView | None:
        return SupportView(self.summary.support) if self.summary.support else None

    @property
    def backward(self) -> dict[str, Any] | None:
        """backward.json: the traced backward passes (and what they kept)."""
        try:
            return json.loads((self.folder / BACKWARD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _repr_html_(self) -> str:
        from demos.lab.pages import inline, report
        from demos.lab.pages.templating import render
        section = report.section(self.summary, self.folder, self.run.about(self.scenario),
                                 self.run.configs().get(self.id, ""))
        return inline.view(render("scenario.html.j2", section=section), self.run.folder)

    def __repr__(self) -> str:
        counted = self.summary.counted
        return (f"<{self.id} ({self.scenario}): {self.status.upper()}, checks "
                f"{sum(bool(c.passed) for c in counted)}/{len(counted)}>")


@dataclass
class RunResult:
    """A run: summary.json typed (`summary`), its folder, and its entries."""
    folder: Path
    summary: RunSummary
    exit_code: int  # the command line's: 0 passed, 1 a check failed or an entry raised, 130
    _configs: dict[str, str] | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        """passed, failed or interrupted."""
        return self.summary.status

    @property
    def passed(self) -> bool:
        return self.summary.status == "passed"

    @property
    def entries(self) -> list[EntryResult]:
        return [EntryResult(self, e) for e in self.summary.scenarios]

    def __getitem__(self, key: str | int) -> EntryResult:
        """An entry by id (or by number)."""
        entries = self.entries
        if isinstance(key, int):
            return entries[key]
        for e in entries:
            if e.id == key:
                return e
        raise KeyError(f"{key!r}: no entry of that id in this run "
                       f"({', '.join(e.id for e in entries)})")

    @property
    def checks(self) -> list[Check]:
        return [c for e in self.summary.scenarios for c in e.checks]

    @property
    def failures(self) -> list[Check]:
        return [c for e in self.summary.scenarios for c in e.failures]

    @property
    def report(self) -> Path:
        return self.folder / REPORT

    def configs(self) -> dict[str, str]:
        """Each entry's resolved config as YAML, from the run's config.yaml."""
        if self._configs is None:
            import yaml

            from demos.lab.core.overrides import entry_id
            try:
                data = yaml.safe_load((self.folder / CONFIG).read_text(encoding="utf-8"))
                self._configs = {str(entry_id(e)): yaml.safe_dump(e, sort_keys=False)
                                 for e in data["scenarios"]}
            except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
                self._configs = {}
        return self._configs

    @staticmethod
    def about(scenario: str) -> str:
        from demos.scenarios import registry
        found = registry().get(scenario)
        return found.about if found is not None else ""

    def _repr_html_(self) -> str:
        from demos.lab.pages import inline
        from demos.lab.pages.report import render_report
        from demos.scenarios import registry
        about = {name: s.about for name, s in registry().items()}
        return inline.view(render_report(self.folder, self.summary, about, self.configs(),
                                         part="body"), self.folder)

    def __repr__(self) -> str:
        return (f"<run {self.summary.run_id}: {self.status.upper()}, {self.summary.passed} of "
                f"{len(self.summary.scenarios)} entries passed; {self.folder}>")


@dataclass
class Comparison:
    """`compare`'s result: its folder (compare.html, compare.json), and whether they agree."""
    folder: Path
    agree: bool
    data: dict[str, Any]  # compare.json
    _html: Callable[[str | None], str] = field(repr=False)

    def _repr_html_(self) -> str:
        from demos.lab.pages import inline
        return inline.view(self._html("body"), self.folder, ("report.css", "compare.css"))

    def __repr__(self) -> str:
        return f"<comparison: {'agree' if self.agree else 'differ'}; {self.folder}>"


def load(folder: str | os.PathLike[str]) -> RunResult:
    """A run folder's result, from its summary.json (a run of the command line's too)."""
    path = Path(folder)
    try:
        data = json.loads((path / SUMMARY).read_text(encoding="utf-8"))
        summary = RunSummary.from_json(data)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no summary.json: not a run folder") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}/{SUMMARY}: not a run's summary ({type(e).__name__}: "
                          f"{e})") from None
    codes = {"passed": 0, "failed": 1, "interrupted": EXIT_INTERRUPTED}
    return RunResult(path, summary, codes.get(summary.status, 1))


# -- the calls -----------------------------------------------------------------------------


def run(target: str | os.PathLike[str] | Mapping[str, Any], *, only: Sequence[str] = (),
        set: Mapping[str, Any] | Sequence[str] = (), device: str | None = None,
        seed: int | None = None, threads: int | str | None = None, dry_run: bool = False,
        output_dir: str | os.PathLike[str] = "outputs", run_name: str | None = None,
        baseline: str | os.PathLike[str] | None = None,
        save_baseline: str | os.PathLike[str] | None = None, quiet: bool = False,
        **keys: Any) -> RunResult:
    """Run a config, as `runner.py run --config ...` does, and return its result.

    `target`: a scenario's name (its shipped configs/<name>.yaml, or its defaults where none
    ships), a config file's path, or the config's data itself (a mapping). `keys`: keys of the
    config's one entry (`run("legendre_fit", lr=1e-5)`); `set`: --set's KEY=VALUE pairs as a
    mapping (`{"scenarios.lenet.epochs": 2, "seed": 3}`). The other arguments are the
    command line's options of the same names; `quiet` keeps the console lines (not the
    warnings) out of the output. Raises ConfigError for a config or usage error (nothing
    ran), RunInterrupted for Ctrl-C (the run's folder whole)."""
    argv, config = config_argv(target)
    if keys:
        if isinstance(set, Mapping):
            set = {**{f"scenarios[0].{k}": v for k, v in keys.items()}, **set}
        else:
            set = [*(f"scenarios[0].{k}={yaml_text(k, v)}" for k, v in keys.items()), *set]
        one_entry(argv, config, keys)
    for assignment in assignments(set):
        argv += ["--set", assignment]
    if only:
        argv += ["--only", only if isinstance(only, str) else ",".join(only)]
    for option, value in (("--device", device), ("--seed", seed), ("--threads", threads),
                          ("--run-name", run_name), ("--baseline", baseline),
                          ("--save-baseline", save_baseline)):
        if value is not None:
            argv += [option, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    argv += ["--output-dir", os.fspath(output_dir)] + (["--dry-run"] if dry_run else [])
    return execute(argv, config, quiet)


def check_function(function: Any, inputs: Any, reference: Callable[..., Any] | None = None,
                   *, double_backward: bool = False, support: Sequence[str] | None = None,
                   require: Sequence[str] = (), rtol: float | None = None,
                   atol: float | None = None, **options: Any) -> RunResult:
    """Your torch.autograd.Function (a class defined anywhere, a notebook's cell included),
    checked as the custom_function scenario checks one named in a config: what backward
    returns, gradcheck, parity with `reference` (a plain-torch function of the same inputs),
    the support matrix, the graph, its stepper and what it saves.

    `inputs`: the tensors passed to apply, in order: a list, or a mapping {name: input}; each a
    tensor (its values and requires_grad), a number or nested lists, or an input spec of the
    config ({"shape": [5, 3]}: random under the seed). `support`: the rows to run (default:
    all); `require`: rows that must be ok. `options`: run's (device, seed, dry_run,
    output_dir, run_name, quiet). The run records the Function as module:Class."""
    entry: dict[str, Any] = {"scenario": "custom_function",
                             "id": getattr(function, "__name__", "function"),
                             "function": spec_of(function, "function"),
                             "inputs": input_specs(inputs)}
    if reference is not None:
        entry["reference"] = spec_of(reference, "reference")
    for key, value in (("double_backward", double_backward or None), ("rtol", rtol),
                       ("atol", atol), ("require", list(require) or None),
                       ("support", None if support is None else list(support))):
        if value is not None:
            entry[key] = value
    return run({"scenarios": [entry]}, **options)


def compare(*runs: RunResult | str | os.PathLike[str],
            baseline: str | os.PathLike[str] | None = None,
            output_dir: str | os.PathLike[str] = "outputs", quiet: bool = False) -> Comparison:
    """Runs side by side, as `runner.py compare` does: what differs beyond tolerance."""
    argv = ["compare", *(os.fspath(r.folder if isinstance(r, RunResult) else r) for r in runs),
            "--output-dir", os.fspath(output_dir)]
    if baseline is not None:
        argv += ["--baseline", os.fspath(baseline)]
    kept: list[Any] = []
    with caller_kept(quiet):
        dispatch(argv, None, kept.append)
    if not kept:  # compare_runs raised before it made anything
        raise ConfigError("compare: nothing was compared")
    made = kept[0]
    return Comparison(made.folder, made.found.agree, made.to_json(), made.html)


# -- how a call becomes a command line ------------------------------------------------------


def config_argv(target: Any) -> tuple[list[str], Any]:
    """The run's first arguments, and the config's data when it is made in memory."""
    from demos.lab.runner.cli import CONFIGS
    from demos.scenarios import registry

    if isinstance(target, Mapping):
        return ["run", "--config", "<config from Python>"], dict(target)
    if not isinstance(target, (str, os.PathLike)):
        raise ConfigError(f"run: expected a scenario's name, a config file or a config's data "
                          f"(a mapping), got {type(target).__name__}")
    text = os.fspath(target)
    if text in registry():
        shipped = CONFIGS / f"{text}.yaml"
        if shipped.is_file():  # as `runner.py NAME` finds it
            shown = os.path.relpath(shipped) if shipped.is_relative_to(Path.cwd()) else shipped
            return ["run", "--config", str(shown)], None
        return ["run", "--config", f"<{text} defaults>"], {"scenarios": [{"scenario": text}]}
    if not text.endswith((".yaml", ".yml")) and os.sep not in text and not os.path.exists(text):
        return [text], None  # the command line's "not a command or a scenario; did you mean"
    return ["run", "--config", text], None


def one_entry(argv: list[str], config: Any, keys: Mapping[str, Any]) -> None:
    """Keyword keys are the one entry's: refused, naming set=, for a config of several."""
    import yaml

    source = argv[2] if config is None and len(argv) == 3 else "the config"
    if config is None and len(argv) == 3:
        try:
            with open(argv[2], encoding="utf-8") as f:
                config = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            return  # the run says what is wrong with the file
    entries = config.get("scenarios") if isinstance(config, dict) else None
    if isinstance(entries, list) and len(entries) > 1:
        key = next(iter(keys))
        raise ConfigError(f"{key}=: {source} has "
                          f"{len(entries)} entries; name one: set={{'scenarios.<id>.{key}': "
                          f"...}}")


def assignments(set: Mapping[str, Any] | Sequence[str]) -> list[str]:
    """--set's KEY=VALUE texts: a mapping's values written as YAML; texts as they are."""
    if isinstance(set, str):
        return [set]
    if isinstance(set, Mapping):
        return [f"{k}={yaml_text(k, v)}" for k, v in set.items()]
    return [str(a) for a in set]


def yaml_text(key: str, value: Any) -> str:
    """A Python value as --set's YAML (1e-05 as 1.0e-05, lists in flow style)."""
    import yaml

    try:
        text = yaml.safe_dump(value, default_flow_style=True, width=10**9)
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}: a value of type {type(value).__name__} has no YAML "
                          f"form; give a number, text, a list or a mapping") from None
    return text.removesuffix("\n").removesuffix("\n...").strip()


def spec_of(obj: Any, key: str) -> str:
    """`obj` as the config's module:attribute: where it is found under that name (a class of
    a notebook's cell is __main__:Name); else in a module made for it in sys.modules."""
    import sys
    import types

    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(name, str) and "<" not in name:
        found: Any = sys.modules.get(module)
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is obj:
            return f"{module}:{name}"
    holder = sys.modules.setdefault("demos_objects", types.ModuleType("demos_objects"))
    label = "".join(c if c.isalnum() else "_" for c in getattr(obj, "__name__", key))
    attribute = f"{label}_{id(obj):x}"
    setattr(holder, attribute, obj)
    return f"demos_objects:{attribute}"


def input_specs(inputs: Any) -> list[dict[str, Any]]:
    """check_function's inputs as the config's input specs."""
    items = (list(inputs.items()) if isinstance(inputs, Mapping)
             else [(None, x) for x in (inputs if isinstance(inputs, (list, tuple)) else [inputs])])
    specs = []
    for name, x in items:
        if isinstance(x, Mapping):
            spec = dict(x)
        elif hasattr(x, "detach") and hasattr(x, "tolist"):  # a tensor
            spec = {"value": x.detach().double().cpu().tolist(),
                    "requires_grad": bool(getattr(x, "requires_grad", True))}
        else:
            spec = {"value": x}
        if name is not None:
            spec.setdefault("name", str(name))
        specs.append(spec)
    return specs


# -- running it here ------------------------------------------------------------------------


def execute(argv: list[str], config: Any, quiet: bool) -> RunResult:
    kept: list[Any] = []
    with caller_kept(quiet):
        code = dispatch(argv, config, kept.append)
    if not kept or kept[0].final is None:  # no run was made (cannot be: a run or an error)
        raise ConfigError("run: no run was made")
    r = kept[0]
    result = RunResult(Path(r.dir), r.final, code)
    if code == EXIT_INTERRUPTED:
        raise RunInterrupted(result)
    return result


def dispatch(argv: list[str], config: Any, keep: Callable[[Any], None]) -> int:
    """The command line's dispatch, in this process: signals as a notebook needs them."""
    from demos.lab.core.signals import StopRequest
    from demos.lab.runner import cli
    from demos.scenarios import registry

    stop = StopRequest()
    stop.embedded = True  # Ctrl-C alone; Ctrl-C again raises here, never ends the process
    return cli.dispatch(argv, registry, PROG, stop, config, keep=keep)


@contextlib.contextmanager
def caller_kept(quiet: bool) -> Iterator[None]:
    """What a run changes in its process, given back to the caller: the random number
    generators' states (torch's, and CUDA's where it started; torch not yet imported has
    none to keep); with `quiet`, stdout."""
    import sys

    torch = sys.modules.get("torch")
    cpu = torch.get_rng_state() if torch is not None else None
    cuda = (torch.cuda.get_rng_state_all()
            if torch is not None and torch.cuda.is_initialized() else None)
    try:
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            yield
    finally:
        if cpu is not None:
            torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
