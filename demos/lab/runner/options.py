"""The command line's words: the run's options with their help (the documentation of the
command line), the typed request a command line or a Python call makes (`RunRequest`), and
the checks of the options that need no config. Torch-free and cheap: --help answers from here.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
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
    """The command line's parser: run's options, each with its help."""
    p = Parser(prog=prog, usage=USAGE, epilog=EPILOG,
               description="Run the autograd demos described by a YAML config.",
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="PATH", help="the YAML config to run (see configs/)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help="override a config value, e.g. seed=3 or "
                        "scenarios.legendre_fit.lr=1e-5 (repeatable; values are YAML)")
    p.add_argument("--only", metavar="ID[,ID...]", action="append",
                   help="run only these scenario entries (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny sizes and step counts: every code path and artifact, in seconds")
    p.add_argument("--device", metavar="DEV",
                   help="auto (cuda > mps > cpu) | cpu | cuda | cuda:N | mps; overrides the config")
    p.add_argument("--seed", metavar="N", help="seed; overrides the config")
    p.add_argument("--threads", metavar="N|auto",
                   help="CPU threads for torch; overrides the config")
    p.add_argument("--output-dir", metavar="DIR", default="outputs",
                   help="where run folders go (default: outputs)")
    p.add_argument("--run-name", metavar="NAME",
                   help="the run's folder name in --output-dir, instead of the start time; it "
                        "must not exist yet")
    p.add_argument("--baseline", metavar="FILE",
                   help="compare the final metrics and params with this baseline: a value out "
                        "of tolerance is a failed check (exit 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--open", action="store_true",
                   help="open the run's report.html in a browser at the end (needs a display)")
    p.add_argument("--save-baseline", metavar="FILE",
                   help="after the run, write its final metrics and params as a baseline "
                        "(YAML, to commit beside the config)")
    p.add_argument("--ensemble", metavar="all|NAME,...", nargs="?", const="all",
                   help="with --save-baseline: rerun the config under other kernel levels and "
                        "thread counts (one process each, --jobs at a time) and save each "
                        "value's measured band, so that the baseline holds on other machines")
    p.add_argument("--jobs", metavar="N", type=int, default=1,
                   help="with --ensemble: its runs at once, each in its own process with its "
                        "share of the cores (default 1)")
    p.add_argument("--watch", action="store_true",
                   help="run, then run again whenever the config or a file of your code it "
                        "loads changes, in this warm process (torch already imported); each "
                        "run a run folder; --output-dir's watch.html shows the newest report; "
                        "Ctrl-C ends it")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config and exit")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return p


OVERRIDES = ("device", "seed", "threads")  # options that set a key of the config's top level
# The shipped configs, by scenario (`runner.py NAME`): demos/configs in an installed copy (the
# package data of demos.configs), else configs/ beside the package, in a checkout.
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
if not CONFIGS.is_dir():
    CONFIGS = CONFIGS.parents[1] / "configs"


@dataclass
class RunRequest:
    """A run, as asked for: by the command line (`parse`) or by the Python API, which builds
    one directly; both hand it to demos.lab.runner.start.perform. The fields are the command
    line's options (see `parser`), and:"""
    config: str | None = None  # the config file, or the name messages give a config in memory
    # the config's data, where made in memory: check_function's holds the very objects it was
    # given (user_code.Code, Given), which travel in it to the run as they are
    data: Mapping[str, Any] | None = None
    sets: list[str | Setting] = field(default_factory=list)  # --set's texts, or Settings
    only: list[str] | None = None
    dry_run: bool = False
    device: Any = None  # --device, --seed, --threads: overrides of the config's keys, as text
    seed: Any = None    # (the command line's, read as YAML) or values (the API's); the
    threads: Any = None  # config's schema validates them
    output_dir: str = "outputs"
    run_name: str | None = None
    baseline: str | None = None
    save_baseline: str | None = None
    no_progress: bool = False
    open: bool = False
    ensemble: str | None = None
    jobs: int = 1
    watch: bool = False
    print_config: bool = False
    list: bool = False
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
