"""What a scenario declares: its typed config, its run, what it reports and the files it writes.

Each scenario is one module in `demos/scenarios/` ending with `SCENARIO = Scenario(...)`. The
runner, the tests and the README's tables read that one declaration; nothing keeps a second
list by hand. Torch-free, like the configs: a scenario imports torch inside `run`, so that
`--list`, `--print-config` and config errors answer without it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping

from demos.lab.core.files import BACKWARD, GRADS, LOSS_PLOT, METRICS
from demos.lab.core.results import CAPABILITIES
from demos.lab.core.schema import ConfigError, param
from demos.lab.core.text import one_line
from demos.lab.core.tolerance import ARITHMETIC, TableEntry, within


@dataclass
class Target:
    """An expected value: `value` within rtol/atol (or a ratio), and/or bounds `min` / `max`.
    The comparison is the tolerance model's (demos.lab.core.tolerance), its default the arithmetic
    tier."""
    value: float | None = param(None, "expected value, met when |actual - value| <= atol + "
                                      "rtol * |value| (or, with ratio, actual / value within "
                                      "[1/ratio, ratio])")
    rtol: float | None = param(None, "relative tolerance; default 1e-5, or 0 when atol or ratio "
                                     "is given", ge=0)
    atol: float | None = param(None, "absolute tolerance; default 0", ge=0)
    ratio: float | None = param(None, "for a positive value: actual / value may lie within "
                                      "[1/ratio, ratio] (log space: a converged loss)", ge=1)
    min: float | None = param(None, "lowest accepted value")
    max: float | None = param(None, "highest accepted value")

    def validate(self, where: str) -> None:
        if self.value is None and self.min is None and self.max is None:
            raise ConfigError(f"{where}: needs at least one of value, min, max")
        if self.value is None and (self.rtol, self.atol, self.ratio) != (None, None, None):
            raise ConfigError(f"{where}: rtol/atol/ratio need a value to compare with")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ConfigError(f"{where}: min {self.min} is above max {self.max}")

    def meets(self, actual: float) -> tuple[bool, str]:
        """Whether `actual` meets the target, and a one-line account of it."""
        ok, parts = actual == actual, []  # NaN never passes
        if self.value is not None:
            rtol, atol = self.rtol, self.atol
            if rtol is None:  # none given: the arithmetic tier's rtol; another given: rtol 0
                rtol = ARITHMETIC[0] if atol is None and self.ratio is None else 0.0
            atol = atol or 0.0
            ok &= within(self.value, actual, rtol, atol, self.ratio)
            ratio = f"ratio {self.ratio:g} or " if self.ratio else ""
            parts.append(f"expected {self.value:.8g} ({ratio}rtol {rtol:g}, atol {atol:g})")
        if self.min is not None:
            ok &= actual >= self.min
            parts.append(f"min {self.min:.8g}")
        if self.max is not None:
            ok &= actual <= self.max
            parts.append(f"max {self.max:.8g}")
        return bool(ok), f"{actual:.8g}; " + ", ".join(parts)


@dataclass
class Expect:
    """Expected final values, by name: the scenario's params and metrics."""
    params: dict[str, Target] = param({}, "expected final parameters, by name")
    metrics: dict[str, Target] = param({}, "expected final metrics, by name")
    written_for: dict[str, Any] = param({}, "the settings the targets hold for, e.g. {lr: "
                                            "5.0e-6, steps: 2000, seed: 0} (the entry's keys, "
                                            "and the run's seed): where a run's differ, its "
                                            "targets are reported, not evaluated")

    def unlike(self, entry: Any, seed: int) -> str | None:
        """Which setting of this run differs from `written_for`, said in words; else None."""
        for key, written in self.written_for.items():
            value = seed if key == "seed" else getattr(entry, key)
            if value != written:  # numbers by value: 5e-6 is 5.0e-6, 2000 is 2000.0
                return (f"{key} is {value!r} here; the targets hold for {written!r} "
                        f"(expect.written_for)")
        return None


@dataclass
class ScenarioConfig:
    """Fields every scenario entry has; each scenario subclasses it with its own typed params."""
    scenario: str = param("", "which scenario (see --list)", required=True)
    id: str | None = param(None, "unique name of this entry, and its folder name; default: "
                                 "the scenario name")
    log_every: int = param(1, "record metrics every N steps (the last step always)", ge=1)
    time_limit: float = param(600.0, "seconds the entry may run; past them it ends as an "
                                     "error, 'did not finish in N s', keeping the files it "
                                     "wrote, and the run goes on (a backward that loops or "
                                     "recurses never returns). 600: the shipped entries take "
                                     "seconds (the slowest, lenet, 4 s), LeNet on the whole of "
                                     "MNIST about 150 s on 2 CPU cores; --dry-run keeps it",
                              gt=0)
    expect: Expect = param(Expect(), "expected values (params: and metrics:, each "
                                     "{name: target}), checked after the run")
    tolerance: dict[str, TableEntry] = param({}, "how far this entry's values may move under "
                                                 "--baseline, by key (all, "
                                                 "metrics, params, metrics.<name>, "
                                                 "params.<name>): {rtol, atol, ratio} or exact")


@dataclass(frozen=True)
class Scenario:
    """One scenario: the whole of what the runner, the tests and the README know about it."""
    name: str                            # the module's name, and `scenario:` in a config
    config: type[ScenarioConfig]         # its typed config; the docstring is its --list line
    run: Callable[[Any, Any], Any]       # run(cfg, ctx) -> Result
    document: str                        # which document it reproduces, e.g. "003, example 2"
    files: tuple[str, ...]               # what a run writes into the entry's folder
    metrics: tuple[str, ...] = ()        # final metrics it reports (expect.metrics may name them)
    params: tuple[str, ...] = ()         # final named scalar params it reports
    dry_run: Mapping[str, Any] = field(default_factory=dict)  # --dry-run: tiny sizes
    # prepare(cfg, where) -> the entry to run: once the run starts, before any entry runs
    # (never while a config loads): e.g. its user's code loaded; a ConfigError here is exit 2
    # like any config error
    prepare: Callable[[Any, str], Any] | None = None
    # under torchrun: runs on every rank (it uses ctx.world: DDP, a DistributedSampler);
    # any other scenario runs on rank 0 only
    data_parallel: bool = False
    # what a run writes besides `files` only when the entry's config asks for it (custom_function
    # draws its second backward with double_backward: true)
    optional_files: tuple[str, ...] = ()

    @property
    def about(self) -> str:
        """One line: what the scenario shows."""
        return " ".join((self.config.__doc__ or "").split())

    @property
    def trains(self) -> bool:
        """Whether it has a training loop (and so a metrics.csv and loss.png)."""
        return METRICS in self.files

    def shrink(self, cfg: ScenarioConfig, keep: Collection[str] = ()) -> ScenarioConfig:
        """The --dry-run version of `cfg`: its `dry_run` sizes, then each field's own dry-run
        rule (a `param(..., dry_run=...)`), applied to the value it has by then; the fields in
        `keep` (set explicitly, by --set) stay as they are."""
        small = dataclasses.replace(cfg, **{k: v for k, v in self.dry_run.items()
                                            if k not in keep})
        rules = {f.name: f.metadata["dry_run"] for f in dataclasses.fields(small)
                 if "dry_run" in f.metadata and f.name not in keep}
        return dataclasses.replace(small, **{name: rule(getattr(small, name))
                                             for name, rule in rules.items()})


# the support matrix's rows that load torch's compiler stack (torch._dynamo: torch.func's grad
# and vmap import it, torch.compile uses it): seconds the first time in a process
COMPILER_ROWS = ("func_grad", "vmap", "compile", "compile_grad", "compile_jvp", "compile_vmap",
                 "inductor")
# a row run only where a config lists it: inductor's first compile in a process builds C++
# (15-37 s here, 0.2 s warm)
ASKED_ONLY = ("inductor",)
# a document's Function is written for float32, as the document is: its autocast row only where
# asked for (LinearFunction's matmuls need custom_fwd/custom_bwd there: checks.md)
DOCUMENTS_LEAVE = ("autocast",)


def support_param(every_row: bool = False, forward_mode: bool = True) -> Any:
    """The `support:` field of a scenario about custom Functions: which rows of the support
    matrix to run. By default the rows that need no compiler (a scenario in seconds);
    `every_row=True`: every row (custom_function, for your own Functions); `forward_mode=False`
    leaves out `forward_ad` too, for a document about reverse mode alone."""
    left_out = ASKED_ONLY if every_row else \
        COMPILER_ROWS + DOCUMENTS_LEAVE + (() if forward_mode else ("forward_ad",))
    rows = [r for r in CAPABILITIES if r not in left_out]
    compiler = ("add func_grad, vmap or compile (and its compile_grad, compile_jvp, "
                "compile_vmap) to run them too (the first loads torch's compiler stack: seconds)")
    forward = "add forward_ad to check and step the twin's forward mode (0.2 s more); "
    return param(rows, "rows of the support matrix to run for its Functions (see 'What a "
                       "Function supports'); [] for none" +
                 ("; add inductor to compile with inductor too (its first compile builds "
                  "C++: 15-37 s)" if every_row else
                  "; " + forward * (not forward_mode) + compiler + "; add autocast to run "
                  "it under torch.autocast"),
                 dry_run=without_compile)


def without_compile(rows: Any) -> Any:
    """--dry-run leaves out the support matrix's compiled rows (compile and its transforms,
    about 0.15 s each a Function once torch.compile is warm; inductor)."""
    return [r for r in rows if not r.startswith("compile") and r != "inductor"] \
        if isinstance(rows, list) else rows


def graph_files(*stems: str) -> tuple[str, ...]:
    """The files `ctx.graph(..., name=stem)` (or ctx.forward) writes for each stem (with `dot`
    installed): the graph, the graph with its traced gradients in the nodes (<stem>_grads), and
    backward.json, where the traced backward of every graph goes."""
    return (*pass_files(*(stem + kind for stem in stems for kind in ("", GRADS))), BACKWARD)


def pass_files(*stems: str) -> tuple[str, ...]:
    """The files of a pass drawn on its own (ctx.forward_mode, ctx.second_backward): the graph
    alone; its steps go to backward.json with the others."""
    return tuple(f"{stem}{ext}" for stem in stems for ext in (".gv", ".pdf", ".svg"))


TRAINING_FILES = (METRICS, LOSS_PLOT)  # written by the runner for what ctx.record kept
LOSS = "loss"  # the recorded value the runner draws as loss.png: ctx.record(t, loss=...)
FINAL_LOSS = "final_loss"  # the metric the console's line for an entry shows


Registry = Mapping[str, Scenario]


class Scenarios(Mapping[str, Scenario]):
    """The scenarios of a package, by name, ordered by document: each module's `SCENARIO`,
    imported when first asked for (a scenario file may import torch at its top); their names,
    documents and descriptions read from the files without running them (`about`), so that
    --help, --list and a name's check stay cheap."""

    def __init__(self, package: str, folder: Path):
        self._package = package
        found = {p.stem: read_declaration(p) for p in sorted(folder.glob("*.py"))
                 if not p.stem.startswith("_")}
        self._about = {name: about for name, (_, about) in found.items()}
        self._names = sorted(found, key=lambda n: (found[n][0], n))
        self._loaded: dict[str, Scenario] = {}

    def __getitem__(self, name: str) -> Scenario:
        if name not in self._about:
            raise KeyError(name)
        if name not in self._loaded:
            import importlib

            try:
                module = importlib.import_module(f"{self._package}.{name}")
            except Exception as e:  # torch refusing its environment (TORCH_LOGS=...), say
                raise ConfigError(import_failure(name, e)) from None
            scenario = getattr(module, "SCENARIO", None)
            if not isinstance(scenario, Scenario) or scenario.name != name:
                raise TypeError(f"{module.__file__} must end with SCENARIO = Scenario("
                                f"name='{name}', ...)")
            self._loaded[name] = scenario
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._about

    def __setitem__(self, name: str, scenario: Scenario) -> None:
        """Stand `scenario` in for a scenario of the package, in this process (the tests'
        monkeypatch.setitem); deleting it loads the file's own again."""
        if name not in self._about:
            raise KeyError(name)
        self._loaded[name] = scenario

    def __delitem__(self, name: str) -> None:
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def about(self, name: str) -> str:
        """Its one line (its Config's docstring), read from its file."""
        return self._about[name]


def import_failure(name: str, e: BaseException) -> str:
    """One line for a scenario file that could not be imported: torch's own failure (its
    environment) said as the runner says it where it imports torch, anything else named."""
    import os
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    if any(f"{os.sep}torch{os.sep}" in f.filename for f in frames):
        return torch_refused(e)
    return f"scenario {name}: its file could not be imported: {one_line(e)}"


def torch_refused(e: BaseException) -> str:
    """One line for torch's own import failing (TORCH_LOGS=nonsense, say): the runner's words
    wherever torch is first imported (a scenario file's top, or the run's start)."""
    return (f"torch could not be imported: {one_line(e)} (check the "
            f"TORCH_* environment variables)")


def read_declaration(path: Path) -> tuple[str, str]:
    """A scenario file's `document=` (of its `SCENARIO = Scenario(...)`) and its Config's
    docstring in one line, read without running the file; ("", "") where it declares none."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    about = next((" ".join((ast.get_docstring(node) or "").split()) for node in tree.body
                  if isinstance(node, ast.ClassDef) and node.name == "Config"), "")
    document = next((str(ast.literal_eval(k.value)) for node in tree.body
                     if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                     and any(isinstance(t, ast.Name) and t.id == "SCENARIO" for t in node.targets)
                     for k in node.value.keywords
                     if k.arg == "document" and isinstance(k.value, ast.Constant)), "")
    return document, about
