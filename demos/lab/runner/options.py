"""The command line's words: the run's options with their help (the documentation of the
command line), the typed request a command line or a Python call makes (`RunRequest`), and
the checks of the options that need no config. Torch-free and cheap: --help answers from here.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, NoReturn

from demos.lab.core.files import NAME_RE
from demos.lab.core.overrides import Setting
from demos.lab.core.safe_yaml import parse_text
from demos.lab.core.schema import ConfigError, did_you_mean, show

USAGE = """%(prog)s [run] --config PATH [options]
       %(prog)s SCENARIO [options]   (its configs/SCENARIO.yaml)
       %(prog)s exercise NAME --output-dir DIR | grade FILE [--results JSON]   (see their --help)"""

EPILOG = """`%(prog)s legendre_fit` runs that scenario with its configs/legendre_fit.yaml; a
first word `run` changes nothing (`%(prog)s run --config X` is `%(prog)s --config X`).

example: %(prog)s --config configs/legendre_fit.yaml --device cpu
         for s in 0 1 2; do %(prog)s lenet --seed $s --run-name lenet-seed$s; done"""


class Parser(argparse.ArgumentParser):
    """One-line errors instead of usage and message."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see --help)")


def parser(prog: str) -> Parser:
    """The command line's parser: RunRequest's options, each with its help and default."""
    p = Parser(prog=prog, usage=USAGE, epilog=EPILOG,
               description="Run the autograd demos described by a YAML config.",
               formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(RunRequest):
        if "help" in f.metadata:
            p.add_argument(f.metadata.get("flag", "--" + f.name.replace("_", "-")), dest=f.name,
                           default=f.default if f.default_factory is MISSING else [],
                           **{k: v for k, v in f.metadata.items() if k != "flag"})
    return p


def option(default: Any, help: str, **argparse: Any) -> Any:
    """A field of RunRequest that is an option of the command line: its default and help, and
    how argparse reads it (flag, where not --<the field's name>; metavar, action, ...)."""
    meta = {"help": help, **argparse}
    return field(default_factory=list, metadata=meta) if default == [] else \
        field(default=default, metadata=meta)


OVERRIDES = ("device", "seed", "threads")  # options that set a key of the config's top level
# The shipped configs, by scenario (`runner.py NAME`): demos/configs in an installed copy (the
# package data of demos.configs), else configs/ beside the package, in a checkout.
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
if not CONFIGS.is_dir():
    CONFIGS = CONFIGS.parents[1] / "configs"


@dataclass
class RunRequest:
    """A run, as asked for: by the command line (`parse`) or by the Python API, which builds
    one directly; both hand it to demos.lab.runner.start.perform. Its options are the command
    line's (`parser` reads them from here), and:"""
    config: str | None = option(None, "the YAML config to run (see configs/)", metavar="PATH")
    # the config's data, where made in memory: check_function's holds the very objects it was
    # given (user_code.Code, Supplied), which travel in it to the run as they are
    data: Mapping[str, Any] | None = None
    sets: list[str | Setting] = option(  # --set's texts, or (the API's) Settings
        [], "override a config value, e.g. seed=3 or scenarios.legendre_fit.lr=1e-5 "
            "(repeatable; values are YAML)", flag="--set", metavar="KEY=VALUE", action="append")
    only: list[str] | None = option(None, "run only these scenario entries (repeatable)",
                                    metavar="ID[,ID...]", action="append")
    dry_run: bool = option(False, "tiny sizes and step counts: every code path and artifact, "
                                  "in seconds", action="store_true")
    # --device, --seed, --threads: overrides of the config's keys, as text (the command line's,
    # read as YAML) or values (the API's); the config's schema validates them
    device: Any = option(None, "auto (cuda > mps > cpu) | cpu | cuda | cuda:N | mps; overrides "
                               "the config", metavar="DEV")
    seed: Any = option(None, "seed; overrides the config", metavar="N")
    threads: Any = option(None, "CPU threads for torch; overrides the config", metavar="N|auto")
    output_dir: str = option("outputs", "where run folders go (default: outputs)", metavar="DIR")
    run_name: str | None = option(None, "the run's folder name in --output-dir, instead of the "
                                        "start time; it must not exist yet", metavar="NAME")
    baseline: str | None = option(None, "compare the final metrics and params with this "
                                        "baseline: a value out of tolerance is a failed check "
                                        "(exit 1)", metavar="FILE")
    no_progress: bool = option(False, "no progress bars", action="store_true")
    open: bool = option(False, "open the run's report.html in a browser at the end (needs a "
                               "display)", action="store_true")
    save_baseline: str | None = option(None, "after the run, write its final metrics and params "
                                             "as a baseline (YAML, to commit beside the config)",
                                       metavar="FILE")
    ensemble: str | None = option(None, "with --save-baseline: rerun the config under other "
                                        "kernel levels and thread counts (one process each, "
                                        "--jobs at a time) and save each value's measured band, "
                                        "so that the baseline holds on other machines",
                                  metavar="all|NAME,...", nargs="?", const="all")
    jobs: int = option(1, "with --ensemble: its runs at once, each in its own process with its "
                          "share of the cores (default 1)", metavar="N", type=int)
    watch: bool = option(False, "run, then run again whenever the config or a file of your code "
                                "it loads changes, in this warm process (torch already "
                                "imported); each run a run folder; --output-dir's watch.html "
                                "shows the newest report; Ctrl-C ends it", action="store_true")
    print_config: bool = option(False, "print the resolved config and exit", action="store_true")
    list: bool = option(False, "list the scenarios and exit", action="store_true")
    command: list[str] = field(default_factory=list)  # as typed: the command line, or the call

    @property
    def overrides(self) -> list[str | Setting]:
        """What changes the config: each --set, then --device, --seed and --threads as
        settings of its top-level keys (one key given twice is an error of the config's)."""
        return [*self.sets, *(Setting(key, read(value, f"--{key} {value}"), f"--{key} {value}")
                              for key in OVERRIDES if (value := getattr(self, key)) is not None)]


def read(value: Any, where: str) -> Any:
    """An override as the config's value: text that YAML reads as a number is that number
    (--seed 3), other text stays as given ('cpu\n' is no device); the API's values as they
    are."""
    if not isinstance(value, str):
        return value
    parsed = parse_text(value, where)
    return value if parsed is None or isinstance(parsed, str) else parsed


def parse(argv: list[str], prog: str, names: list[str], configs: Path) -> RunRequest:
    """The command line `argv` as a request: options, after an optional first word `run`, or a
    scenario's name (its shipped config, in `configs`); any other word is an error naming the
    scenarios."""
    args = parser(prog).parse_args(by_name(argv, names, configs))
    return RunRequest(**{f.name: getattr(args, f.name) for f in fields(RunRequest)
                         if hasattr(args, f.name)}, command=[prog, *argv])


def by_name(argv: list[str], names: list[str], configs: Path) -> list[str]:
    """`run [options]` as `[options]`; `NAME [options]` as `--config configs/NAME.yaml
    [options]`."""
    if argv[:1] == ["run"]:
        return argv[1:]
    if not argv or argv[0].startswith("-"):
        return argv
    if argv[0] not in names:
        hint = (f"; a config file goes after --config: --config {argv[0]}"
                if argv[0].endswith((".yaml", ".yml")) or os.sep in argv[0]
                else did_you_mean(argv[0], names))
        raise ConfigError(f"{argv[0]}: unknown command: name a scenario, or a config with "
                          f"--config PATH{hint}")
    path = configs / f"{argv[0]}.yaml"
    if not path.is_file():
        raise ConfigError(f"{argv[0]}: its config {path} is not here; python -m "
                          f"demos.scenarios.{argv[0]} runs it on its defaults")
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    return ["--config", shown, *argv[1:]]


# What a run checks before any work: one line each.

def check_run(r: RunRequest) -> None:
    """The options that only make sense together (--ensemble, --jobs), or never do."""
    for option, path in (("--baseline", r.baseline), ("--save-baseline", r.save_baseline)):
        if path == "":
            raise ConfigError(f"{option}: an empty path; name a file")
    if r.save_baseline:  # before the run: a file it could write, of this kind of run
        from demos.lab.comparing.baseline import check_writable
        check_writable(r.save_baseline, r.config, r.output_dir, r.dry_run)
    if r.ensemble is not None:
        if not r.save_baseline:
            raise ConfigError("--ensemble: only with --save-baseline FILE (it measures the "
                              "baseline's bands)")
        alone("--ensemble", r, "baseline", "print_config", "open")
    elif r.jobs != 1:
        raise ConfigError("--jobs: only with --ensemble")
    if r.watch:
        alone("--watch", r, "ensemble", "save_baseline", "open", "run_name", "print_config",
              why=" (every rerun is a run of its own)")
    if not 1 <= r.jobs <= 256:
        raise ConfigError(f"--jobs: must be from 1 to 256, got {r.jobs}")
    if r.run_name is not None and not NAME_RE.fullmatch(r.run_name):
        raise ConfigError(f"--run-name {show(r.run_name)}: must be a folder-safe name "
                          f"(letters, digits, _ . -; at most 100)")


def alone(option: str, r: RunRequest, *others: str, why: str = "") -> None:
    """`option` is not given with any of `others` (the request's fields, named as options),
    nor under torchrun."""
    for name in others:
        if getattr(r, name) not in (None, False):
            raise ConfigError(f"{option}: not with --{name.replace('_', '-')}{why}")
    from demos.lab.runner.torchrun import from_env
    if from_env().active:
        raise ConfigError(f"{option}: not under torchrun; run it as one process")


def load_baseline(path: str | None, dry_run: bool):
    """--baseline's file, read and validated before any work."""
    if not path:
        return None
    from demos.lab.comparing import baseline
    base = baseline.read_baseline(path)
    if base.dry_run != dry_run:
        raise ConfigError(f"--baseline {path}: saved from {baseline.kind(base.dry_run)}, this "
                          f"is {baseline.kind(dry_run)}; their values cannot agree")
    return base
