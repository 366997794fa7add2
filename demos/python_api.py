"""The Python API, the command line's equal for notebooks and scripts (`from demos import run`):
each call is one run of the runner in this process, its results typed, each with a
`_repr_html_`. What it does and guarantees: demos/docs/python.md.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import html
import inspect
import io
import json
import os
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from demos.exercises.results import GradeResult, Ungradable  # noqa: F401  (demos.Ungradable)
from demos.lab.core import user_code
from demos.lab.core.files import (
    BACKWARD,
    CONFIG,
    EXPLAIN,
    GRADS,
    NAME_RE,
    REPORT,
    SUMMARY,
    make_run_dir,
    write_atomic,
    write_json,
)
from demos.lab.core.overrides import entry_id, setting
from demos.lab.core.results import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    Check,
    EntrySummary,
    Row,
    RunSummary,
    read_summary,
)
from demos.lab.core.safe_yaml import read_yaml
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import StopRequest
from demos.lab.core.user_code import Code, Supplied
from demos.lab.pages import inline, report
from demos.lab.pages.artifacts import Artifacts
from demos.lab.pages.templating import render
from demos.lab.runner import start
from demos.lab.runner.options import CONFIGS, RunRequest, by_name
from demos.scenarios import registry


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (a notebook's interrupt) stopped a run at a step boundary; its folder is whole
    (summary.json status "interrupted", the report) and `result` holds it."""

    def __init__(self, result: RunResult):
        super().__init__(f"interrupted: what was done is in {result.folder}")
        self.result = result


# -- the results ---------------------------------------------------------------------------


@dataclass
class GraphView:
    """An autograd graph, drawn: by a run's entry (its folder) or by `graph` (graph_<time>/),
    with its stepper where it was traced."""
    folder: Path  # where its files are: <name>.svg, .pdf, .gv, backward.json
    name: str  # the file stem
    checks: list[Check] = field(default_factory=list)  # forward_mode's: J·v held to torch's

    @property
    def files(self) -> list[Path]:
        """Its drawings (the graph, then with its gradients)."""
        return [self.folder / f"{self.name}{kind}{ext}" for kind in ("", GRADS)
                for ext in (".svg", ".pdf", ".gv")
                if (self.folder / f"{self.name}{kind}{ext}").is_file()]

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The stepper's steps (backward.json), one per node; [] when it was not traced."""
        return report.backward_traces(self.folder).get(self.name, [])

    @property
    def saved(self) -> dict[str, Any] | None:
        """What the graph saved for backward (backward.json's ledger): its tensors, their
        bytes, and when backward let each go."""
        return next((g.get("saved") for g in report.backward_data(self.folder)
                     if g.get("graph") == self.name), None)

    @property
    def explanation(self) -> str:
        """explain.txt: the graph walked, backward step by step, what it kept."""
        try:
            return (self.folder / EXPLAIN).read_text(encoding="utf-8")
        except OSError:
            return ""

    def _repr_html_(self) -> str:
        owner = self.folder.name
        found = [g for g in report.graphs(self.folder, owner, report.files_of(self.folder))
                 if g.stem == self.name]
        if not found:
            return inline.view(f"<p>{html.escape(owner)} has no graph {html.escape(self.name)} "
                               f"(no {html.escape(self.name)}.svg)</p>", None)
        return inline.view(render("graph.html.j2", graph=found[0], e={"id": owner}),
                           self.folder.parent)

    def __repr__(self) -> str:
        return f"<graph {self.name} in {self.folder}: {len(self.steps)} traced steps>"


@dataclass
class SupportView:
    """A support matrix: {Function: {capability: Row}}, a Row's `status` and `detail`."""
    data: dict[str, dict[str, Row]]

    def status(self, function: str, capability: str) -> str:
        """ok, unsupported, fails, differs or skipped."""
        return self.data[function][capability].status

    def _repr_html_(self) -> str:
        return inline.view(render("support.html.j2", support=report.support_matrix(self.data)),
                           None)

    def __repr__(self) -> str:
        return "\n".join(f"{f}: " + ", ".join(f"{c} {row.status}" for c, row in rows.items())
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
    failures = property(lambda self: self.summary.failures)
    passed = property(lambda self: self.summary.status == "passed")

    @property
    def folder(self) -> Path:
        return self.run.folder / self.id

    @property
    def files(self) -> list[str]:
        """Every file in its folder, as the report lists them."""
        return report.files_of(self.folder)

    @property
    def graphs(self) -> dict[str, GraphView]:
        """Its autograd graphs by name (the .svg files drawn), each with its stepper."""
        return {f[:-4]: GraphView(self.folder, f[:-4]) for f in self.files
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
        about = registry().about(self.scenario) if self.scenario in registry() else ""
        section = report.section(self.summary, self.folder, about,
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
        try:
            data = yaml.safe_load((self.folder / CONFIG).read_text(encoding="utf-8"))
            return {str(entry_id(e)): yaml.safe_dump(e, sort_keys=False)
                    for e in data["scenarios"]}
        except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
            return {}

    def _repr_html_(self) -> str:
        about = {name: registry().about(name) for name in registry()}
        return inline.view(report.render_report(self.folder, self.summary, about,
                                                self.configs(), part="body"), self.folder)

    def __repr__(self) -> str:
        return (f"<run {self.summary.run_id}: {self.status.upper()}, {self.summary.passed} of "
                f"{len(self.summary.scenarios)} entries passed; {self.folder}>")


def load(folder: str | os.PathLike[str] | RunResult) -> Any:
    """A run folder's result; for an output folder, every run in it, oldest first (the
    folders index.html leaves out, left out). See demos/docs/python.md#run."""
    path = Path(text_of("load", folder.folder if isinstance(folder, RunResult) else folder))
    if path.is_dir() and not os.path.lexists(path / SUMMARY):  # an output folder
        runs = []
        for p in sorted(path.iterdir()):
            if p.is_dir() and not p.is_symlink() and os.path.lexists(p / SUMMARY):
                with contextlib.suppress(ConfigError):
                    runs.append(load(p))
        return sorted(runs, key=lambda r: r.summary.started)
    summary = read_summary(path)
    return RunResult(path, summary, EXIT_CODES.get(summary.status, EXIT_FAILED))


# -- the calls -----------------------------------------------------------------------------


def run(target: str | os.PathLike[str] | Mapping[str, Any], *,
        only: str | Sequence[str] | None = None, set: Mapping[str, Any] | Sequence[str] = (),
        device: str | None = None,
        seed: int | None = None, threads: int | str | None = None, dry_run: bool = False,
        output_dir: str | os.PathLike[str] = "outputs", run_name: str | None = None,
        baseline: str | os.PathLike[str] | None = None,
        save_baseline: str | os.PathLike[str] | None = None, quiet: bool = False,
        **keys: Any) -> RunResult:
    """Run a config, as `runner.py --config ...` does, and return its result: `target` a
    scenario's name, a config file or its data, `keys` its one entry's keys; the rest are
    the command line's options (demos/docs/python.md#run)."""
    options = {k: v for k, v in locals().items() if k in RUN_OPTIONS}  # the arguments above
    return perform(request_of(target, options, keys, "run", target), quiet)


# run's options (the command line's), with their defaults: its keyword arguments but quiet
RUN_OPTIONS = {k: p.default for k, p in inspect.signature(run).parameters.items()
               if p.kind is p.KEYWORD_ONLY and k != "quiet"}


def check_function(function: Any, inputs: Any, reference: Callable[..., Any] | None = None,
                   *, double_backward: bool = False, intended: bool = False,
                   support: Sequence[str] | None = None,
                   require: Sequence[str] = (), rtol: float | None = None,
                   atol: float | None = None, **options: Any) -> RunResult:
    """Your torch.autograd.Function (or custom op), the very class and tensors given, checked
    as the custom_function scenario checks one named in a config; `options`: run's, and `id`,
    the entry's (demos/docs/python.md#check_function)."""
    import torch

    if not (isinstance(function, type) and issubclass(function, torch.autograd.Function)
            or isinstance(function, torch.library.CustomOpDef)):
        raise ConfigError(f"check_function: {short(function)} is not a "
                          f"torch.autograd.Function subclass or a torch.library.custom_op")
    if reference is not None and not callable(reference):
        raise ConfigError(f"check_function: reference {short(reference)} is not callable")
    function, reference = (on_disk(f) for f in (function, reference))
    entry: dict[str, Any] = {"scenario": "custom_function",
                             "id": text_of("id", options.pop("id", None) or
                                           entry_id_of(function)),
                             "function": Code(name_of(function), function),
                             "inputs": input_specs(inputs)}
    rows = "a capability's name or a list of them"
    for key, value in (("reference", None if reference is None else Code(name_of(reference),
                                                                          reference)),
                       ("double_backward", double_backward or None),
                       ("intended", intended or None), ("rtol", rtol),
                       ("atol", atol), ("require", texts("require", require, rows) or None),
                       ("support", None if support is None else texts("support", support, rows))):
        if value is not None:
            entry[key] = value
    quiet = bool(options.pop("quiet", False))
    keys = {k: options.pop(k) for k in list(options) if k not in RUN_OPTIONS}
    request = request_of({"scenarios": [entry]}, {**RUN_OPTIONS, **options}, keys,
                         "check_function", function, inputs, reference)
    request.config = "<check_function>"
    return perform(request, quiet)


def on_disk(obj: Any) -> Any:
    """check_function's function or reference as its file defines it now: loaded again where
    the file changed since it was loaded (as --watch does), said in a warning. A custom op
    defined again since (another file's, a cell run again) is refused: torch runs the last."""
    from torch._library.custom_ops import OPDEFS, CustomOpDef

    if isinstance(obj, CustomOpDef) and OPDEFS.get(obj._qualname) is not obj:
        last = getattr(getattr(OPDEFS.get(obj._qualname), "_init_fn", None), "__code__", None)
        raise ConfigError(f"check_function: the custom op {obj._qualname} was defined again "
                          f"since this one was made{f' (by {last.co_filename})' if last else ''}"
                          f": torch runs the last one defined; pass that one")
    now, path = (obj, None) if obj is None else user_code.current(obj, "check_function")
    if path:
        warnings.warn(f"{path} changed since it was loaded: checking {obj.__qualname__} as the "
                      f"file defines it now (loaded again, as --watch does)", stacklevel=3)
    return now


def graph(output: Any, names: Mapping[str, Any] | None = None, *, name: str = "graph",
          output_dir: str | os.PathLike[str] = "outputs") -> GraphView:
    """ctx.graph on your own tensors: the graph behind `output` drawn, walked, traced, into
    `output_dir`/graph_<time>/ (demos/docs/python.md#graph-the-instruments-on-your-own-tensors)."""
    import torch

    from demos.lab.runner.looking import look

    outs = output if isinstance(output, tuple) else (output,)
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise ConfigError(f"graph: {short(output)} is not a tensor or a tuple of tensors")
    named = tensors_named("graph", "names", names)
    return looked("graph", name, output_dir, lambda folder, artifacts: look(
        output, named, name, folder, artifacts, what=folder.name))


def forward_mode(run: Callable[..., Any], inputs: Mapping[str, Any], *,
                 name: str = "forward_mode",
                 output_dir: str | os.PathLike[str] = "outputs") -> GraphView:
    """ctx.forward_mode on `run(*inputs.values())`, into `output_dir`/forward_mode_<time>/
    (demos/docs/python.md#graph-the-instruments-on-your-own-tensors)."""
    from demos.lab.runner.looking import look_forward

    if not callable(run):
        raise ConfigError(f"forward_mode: {short(run)} is not callable")
    named = tensors_named("forward_mode", "inputs", inputs)
    if not named:
        raise ConfigError("forward_mode: no inputs; name the tensors run takes, in order")
    return looked("forward_mode", name, output_dir, lambda folder, artifacts: look_forward(
        run, named, name, folder, artifacts, what=folder.name))


def tensors_named(call: str, what: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """`given` as {name: tensor}, or a ConfigError naming the entry that is not one."""
    import torch

    named = dict(given or {})
    bad = next((k for k, v in named.items()
                if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise ConfigError(f"{call}: {what}[{short(bad)}]: {what} map a name to a tensor")
    return named


def looked(call: str, name: str, output_dir: str | os.PathLike[str],
           looking: Callable[[Path, Any], Any]) -> GraphView:
    """`looking(folder, artifacts)` in a new folder <call>_<time>/ of `output_dir`, its
    backward.json and explain.txt written there, its drawings waited for; its view."""
    if not NAME_RE.fullmatch(text_of("name", name)):
        raise ConfigError(f"{call}: name {short(name)}: must be a folder-safe file name "
                          f"(letters, digits, _ . -)")
    folder = make_run_dir(Path(text_of("output_dir", output_dir)), dt.datetime.now(),
                          prefix=f"{call}_").absolute()
    said: list[str] = []
    artifacts = Artifacts(said.append)
    seen = looking(folder, artifacts)
    write_json(folder / BACKWARD, {"graphs": [seen.backward]})
    write_atomic(folder / EXPLAIN, seen.explanation)
    artifacts.wait()
    for message in said:  # no dot, say: the .gv is there, the pictures are not
        warnings.warn(message, stacklevel=3)
    return GraphView(folder, name, seen.checks)


# -- the exercise kit ----------------------------------------------------------------------


def exercise(name: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> list[Path]:
    """`autograd-demos exercise NAME --output-dir DIR`; the files written
    (demos/docs/exercises.md)."""
    from demos.exercises.make import write

    return write(text_of("exercise", name), text_of("output_dir", output_dir))


def grade(file: str | os.PathLike[str] | type, grading: str | os.PathLike[str] | None = None,
          results: str | os.PathLike[str] | None = None) -> GradeResult:
    """`autograd-demos grade FILE [--grading YAML] [--results JSON]`, printing nothing; `file`
    may be the Function class itself (demos/docs/python.md#exercise-and-grade-the-exercise-kit)."""
    from demos.exercises.grade import grade_file

    return grade_file(file if isinstance(file, type) else text_of("grade", file),
                      None if grading is None else text_of("grading", grading),
                      None if results is None else text_of("results", results))


# -- how a call becomes a run's request ---------------------------------------------------


def request_of(target: Any, options: Mapping[str, Any], keys: Mapping[str, Any],
               *call: Any) -> RunRequest:
    """The request run(target, **options, **keys) makes: the command line's, typed; `call`,
    the function called and its arguments, is what the run records as its command."""
    config, data = config_of(target)
    given, only = options["set"], options["only"]
    # set=: a mapping's values go into the config as they are; texts are --set's KEY=VALUE
    sets: list[Any] = ([setting(text_of("set", k), v) for k, v in given.items()]
                       if isinstance(given, Mapping) else texts(
                           "set", given, "a mapping of KEY: VALUE, or a list of 'KEY=VALUE' texts"))
    if only is not None:  # one id or several, joined as the command line joins them
        only = [",".join(texts("only", only, "an entry's id or a list of them"))]
    if keys:
        one_entry(config, data, keys)
        sets = [*(setting(f"scenarios[0].{k}", v) for k, v in keys.items()), *sets]
    shown = {k: v for k, v in options.items() if v != RUN_OPTIONS[k]}
    return RunRequest(
        config=config, data=data, sets=sets, only=only, dry_run=bool(options["dry_run"]),
        device=options["device"], seed=options["seed"], threads=options["threads"],
        output_dir=text_of("--output-dir", options["output_dir"]),
        command=[called(*call, **shown, **keys)],
        **{k: None if options[k] is None else text_of(f"--{k.replace('_', '-')}", options[k])
           for k in ("run_name", "baseline", "save_baseline")})  # the command line's texts


def called(function: str, *args: Any, **kwargs: Any) -> str:
    """The call as it was made, `demos.run('legendre_fit', lr=1e-05)`: a run's record of
    what started it (the report's command, summary.json's)."""
    shown = [name_of(a) if isinstance(a, type) or callable(a) and not isinstance(a, Mapping)
             else short(a) for a in args if a is not None]
    shown += [f"{k}={os.fspath(v) if isinstance(v, os.PathLike) else v!r}"
              for k, v in kwargs.items()]
    return f"demos.{function}({', '.join(shown)})"


def config_of(target: Any) -> tuple[str, Any]:
    """The run's config: its file (or the name messages give one made in memory), and its
    data where it is made in memory (None: read from the file)."""
    if isinstance(target, Mapping):
        return "<config from Python>", dict(target)
    if not isinstance(target, (str, os.PathLike)):
        raise ConfigError(f"run: expected a scenario's name, a config file or a config's data "
                          f"(a mapping), got {type(target).__name__}")
    text, names = text_of("run", target), list(registry())
    if text in names and not (CONFIGS / f"{text}.yaml").is_file():  # a scenario that ships none
        return f"<{text} defaults>", {"scenarios": [{"scenario": text}]}
    if text in names:  # its shipped config, as `runner.py NAME` finds it
        return by_name([text], names, CONFIGS)[1], None
    if text.endswith((".yaml", ".yml")) or os.sep in text or os.path.exists(text):
        return text, None
    if not text.startswith("-") and text != "run":
        by_name([text], names, CONFIGS)  # the command line's "did you mean"
    raise ConfigError(f"run: {text}: not a scenario or a config file (the command line's "
                      f"options are run()'s arguments)")


def one_entry(config: str, data: Any, keys: Mapping[str, Any]) -> None:
    """Keyword keys are the one entry's: refused, naming set=, for a config of several."""
    source = "the config" if data is not None else config
    if data is None:
        try:
            data = read_yaml(config)
        except ConfigError:
            return  # the run says what is wrong with the file
    entries = data.get("scenarios") if isinstance(data, dict) else None
    if isinstance(entries, list) and len(entries) > 1:
        key = next(iter(keys))
        raise ConfigError(f"{key}=: {source} has "
                          f"{len(entries)} entries; name one: set={{'scenarios.<id>.{key}': "
                          f"...}}")


def text_of(name: str, value: Any) -> str:
    """An argument as the command line's text: text, a path or a number (not a bool); a
    ConfigError naming the argument for anything else, and for text with a NUL character."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{name}: expected text or a path, got {type(value).__name__}")
    text = str(value)
    if "\0" in text:
        raise ConfigError(f"{name}: {text!r} holds a NUL character")
    return text


def texts(name: str, value: Any, expected: str) -> list[str]:
    """A text, or a list of texts, as a list (each as text_of checks it); else a ConfigError
    saying what was `expected`."""
    if isinstance(value, str):
        return [text_of(name, value)]
    if isinstance(value, Sequence):
        return [text_of(name, v) for v in value]
    raise ConfigError(f"{name}: {expected}, got {type(value).__name__}")


def short(obj: Any) -> str:
    """An object named in a message, one line, not too long."""
    text = " ".join(repr(obj).split())
    return text if len(text) <= 60 else text[:57] + "..."


def name_of(obj: Any) -> str:
    """A class's or function's name as a config names one, module:name (`__main__:MyCube`;
    a custom op `torch.ops.mylib:cube`): for the records, the objects themselves are checked."""
    if hasattr(obj, "_qualname") and "::" in str(obj._qualname):  # a torch.library.custom_op
        namespace, _, name = str(obj._qualname).partition("::")
        return f"torch.ops.{namespace}:{name}"
    qualname = str(getattr(obj, "__qualname__", "")).rpartition("<locals>.")[2]
    parts = [p for p in qualname.split(".") if p.isidentifier()]
    return f"{getattr(obj, '__module__', None) or 'python'}:{'.'.join(parts) or 'function'}"


def entry_id_of(function: Any) -> str:
    """The entry's id for a Function: its class name, made folder-safe (NAME_RE)."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_"
                   for c in getattr(function, "__name__", getattr(function, "_name", "")))[
        :100].lstrip(".-")
    return name or "function"


def input_specs(inputs: Any) -> list[dict[str, Any]]:
    """check_function's inputs as the config's input specs, each holding what was given
    (Supplied): a tensor, described by its shape and marked `given`; a value that is no tensor,
    passed to apply as it is."""
    items = (list(inputs.items()) if isinstance(inputs, Mapping)
             else [(None, x) for x in (inputs if isinstance(inputs, (list, tuple)) else [inputs])])
    specs = []
    for i, (name, x) in enumerate(items):
        name = f"x{i}" if name is None else str(name)
        if isinstance(x, Mapping):  # an input spec: made by the run, as a config's
            specs.append({"name": name, **x})
            continue
        if hasattr(x, "detach") and hasattr(x, "is_floating_point"):  # a tensor
            if x.is_complex():
                raise ConfigError(f"inputs[{i}]: a complex tensor; the checks run in "
                                  f"float64, on real numbers")
            floating = x.is_floating_point()  # checked in float64; indices, a mask: as given
            specs.append({"name": name, "shape": list(x.shape), "given": True,
                          "dtype": "float64" if floating else str(x.dtype).removeprefix("torch."),
                          "requires_grad": floating and bool(x.requires_grad),
                          "value": Supplied(x)})
        else:  # a number, a tuple, None: passed to apply as it is
            specs.append({"name": name, "tensor": False, **recorded(x)})
    return specs


def recorded(x: Any) -> dict[str, Any]:
    """A value given to check_function that is not a tensor, with what config.yaml, run.log and
    the report record of it: itself, where it is short plain data (a dim, an index tuple);
    else what it is, marked `given` (a list of 10^6 numbers, an array: never its values)."""
    value = list(x) if isinstance(x, tuple) else x
    try:
        if len(repr(x)) <= 1000 and yaml.safe_dump(value):
            return {"value": Supplied(x, value)}
    except Exception:  # no plain data (an array): yaml cannot write it
        pass
    shape = getattr(x, "shape", None)
    size = f" of shape {list(shape)}" if shape is not None else \
        f" of {len(x)} items" if hasattr(x, "__len__") else ""
    return {"given": True,
            "value": Supplied(x, f"<{type(x).__name__}{size}, given to check_function>")}


# -- running it here ------------------------------------------------------------------------


LOCK = threading.RLock()  # one run at a time in a process: torch's settings are the process's


def perform(request: RunRequest, quiet: bool) -> RunResult:
    """The run `request` asks for, in this process, signals as a notebook needs them: the
    command line's own path (demos.lab.runner.start.perform) from here on."""
    made: list[Any] = []
    with LOCK, caller_kept(quiet):  # another thread's run first: they would share torch, stdout
        stop = StopRequest()
        stop.embedded = True  # Ctrl-C alone; Ctrl-C again raises here, never ends the process
        code = start.perform(lambda: request, start.Call(registry, stop, made.append))
    if not made or made[0].final is None:  # no run was made (cannot be: a run or an error)
        raise ConfigError("run: no run was made")
    result = RunResult(Path(made[0].dir), made[0].final, code)
    if code == EXIT_INTERRUPTED:
        raise RunInterrupted(result)
    return result


@contextlib.contextmanager
def caller_kept(quiet: bool) -> Iterator[None]:
    """What a run changes in its process, given back to the caller: the random number
    generators' states (torch's, and CUDA's where it started; torch not yet imported has
    none to keep); with `quiet`, stdout."""
    torch = sys.modules.get("torch")
    cuda = range(torch.cuda.device_count() if torch and torch.cuda.is_initialized() else 0)
    kept = torch.random.fork_rng(cuda, device_type="cuda") if torch else contextlib.nullcontext()
    with kept, (contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext()):
        yield
