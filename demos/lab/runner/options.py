"""The command line's words: each command's options with their help (the documentation of the
command line), how a command line is read (the command named first, or a run), and the
checks of the options that need no config. Torch-free and
cheap: --help answers from here."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, NoReturn

from demos.lab.core.config import DEVICE_RE
from demos.lab.core.overrides import Setting
from demos.lab.core.schema import MAX_INT, ConfigError, did_you_mean, show


class Parser(argparse.ArgumentParser):
    """One-line errors; and the names of its options (-h and --help too), from argparse's own
    table of them (private, but there since argparse began)."""

    def error(self, message: str) -> NoReturn:  # one line instead of usage + message
        raise ConfigError(f"{message} (see --help)")

    @property
    def option_names(self) -> set[str]:
        return set(self._option_string_actions)


def config_options(p: argparse._ActionsContainer, sweep: bool) -> None:  # a parser or a group
    """The config and what overrides it: run's options and, for every point, sweep's."""
    each = " in every point" if sweep else ""
    p.add_argument("--config", metavar="PATH", required=sweep,
                   help="the YAML config to run (see configs/)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help=f"override a config value{each}, e.g. seed=3 or "
                        f"scenarios.legendre_fit.lr=1e-5 (repeatable; values are YAML)")
    p.add_argument("--only", metavar="ID[,ID...]", action="append",
                   help=f"run only these scenario entries{each} (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny sizes and step counts: every code path and artifact, in seconds")
    p.add_argument("--device", metavar="DEV",
                   help="auto (cuda > mps > cpu) | cpu | cuda | cuda:N | mps; overrides the config")
    p.add_argument("--seed", metavar="N", type=int,
                   help="seed; overrides the config" + (" (not with --seeds)" if sweep else ""))
    p.add_argument("--threads", metavar="N|auto",
                   help="CPU threads for torch; overrides the config" +
                        (" (else --jobs shares the cores among the points)" if sweep else ""))
    p.add_argument("--output-dir", metavar="DIR", default="outputs",
                   help=f"where {'the sweep folder goes' if sweep else 'run folders go'} "
                        f"(default: outputs)")
    p.add_argument("--run-name", metavar="NAME",
                   help=f"the {'sweep' if sweep else 'run'}'s folder name in --output-dir, "
                        f"instead of the start time; it must not exist yet")
    p.add_argument("--baseline", metavar="FILE",
                   help=f"compare the final metrics and params{each} with this baseline: a "
                        f"value out of tolerance is a failed check (exit 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run_options(p: argparse.ArgumentParser) -> None:
    config_options(p, sweep=False)
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


def sweep_options(p: argparse.ArgumentParser) -> None:
    sweep = p.add_argument_group("the sweep")
    sweep.add_argument("--seeds", metavar="LIST",
                       help="short for --sweep seed=...: 0,1,2 or a range 0-4 (or both: 0-2,7)")
    sweep.add_argument("--sweep", metavar="KEY=V1,V2,...", action="append",
                       help="run the config once per value (repeatable: every combination); "
                            "keys as in --set")
    sweep.add_argument("--jobs", metavar="N", type=int, default=1,
                       help="points run at once, each in its own process with its share of "
                            "the cores (default 1)")
    sweep.add_argument("--plan-only", action="store_true",
                       help="run nothing: make the sweep's folder with its plan "
                            "(sweep-plan.json) and print each point's command, one a line, "
                            "for a scheduler to run; then aggregate the folder")
    config_options(p.add_argument_group("every point, as for run"), sweep=True)


def aggregate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR",
                   help="a sweep folder, or any folder with run folders under it (up to four "
                        "deep): its sweep.json and sweep.html are written there")


def compare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN", nargs="+",
                   help="run folders, two or more; the first is the reference")
    p.add_argument("--baseline", metavar="FILE",
                   help="judge the runs by this baseline's tolerances and bands")
    p.add_argument("--output-dir", metavar="DIR", default="outputs",
                   help="where the compare_<time> folder goes (default: outputs)")


@dataclass
class RunRequest:
    """A run, as asked for: the command line's `run` with its options (`RunRequest.of(args)`),
    or the Python API's call, which builds one directly (no command line in between). The
    fields are run's options (see run_options). `sets`: --set's KEY=VALUE texts, or Settings,
    whose values go into the config as they are."""
    config: str | None = None  # the config file, or the name messages give a config in memory
    sets: list[str | Setting] = field(default_factory=list)
    only: list[str] | None = None
    dry_run: bool = False
    device: str | None = None
    seed: int | None = None
    threads: str | None = None
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
    command: str = "run"

    @classmethod
    def of(cls, args: argparse.Namespace) -> RunRequest:
        """The request the parsed command line `args` makes."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})

    def argv(self) -> list[str]:
        """The command line that makes the same run: what a run from Python records as its
        command (`=` only where a value starts with "-")."""
        out = ["run", "--config", str(self.config)]
        given = [("--set", str(s)) for s in self.sets]
        given += [("--only", ",".join(self.only))] if self.only else []
        given += [(f"--{name.replace('_', '-')}", str(getattr(self, name)))
                  for name in ("device", "seed", "threads", "run_name", "baseline",
                               "save_baseline", "output_dir")
                  if getattr(self, name) is not None]
        for option, value in given:
            out += [f"{option}={value}"] if value.startswith("-") else [option, value]
        return out + ["--dry-run"] * self.dry_run + ["--no-progress"] * self.no_progress


class Command(NamedTuple):
    options: Callable[[argparse.ArgumentParser], None]
    about: str
    usage: str | None = None  # where argparse's own would mislead


COMMANDS = {
    "run": Command(run_options,
                   "run a config: its scenario entries, their checks and the report (the "
                   "default command)"),
    "sweep": Command(sweep_options,
                     "run a config once per seed or value, each point an ordinary run in "
                     "its own process; then sweep.json and sweep.html",
                     "%(prog)s --config PATH (--seeds LIST | --sweep KEY=V1,V2,...) "
                     "[--jobs N] [options]"),
    "aggregate": Command(aggregate_options,
                         "build sweep.json and sweep.html from the run folders under DIR "
                         "(e.g. points run by a scheduler, one command each)"),
    "compare": Command(compare_options,
                       "compare run folders with the first: a table of what differs beyond "
                       "tolerance, and compare.html; exit 0 when they agree, 1 when not",
                       "%(prog)s RUN_A RUN_B [RUN_C ...] [--baseline FILE] "
                       "[--output-dir DIR]"),
}

USAGE = """%(prog)s [run] --config PATH [options]
       %(prog)s SCENARIO [options]   (its configs/SCENARIO.yaml)
       %(prog)s sweep --config PATH (--seeds LIST | --sweep KEY=V1,V2,...) [options]
       %(prog)s aggregate DIR
       %(prog)s compare RUN_A RUN_B [RUN_C ...] [--baseline FILE]
       %(prog)s COMMAND --help"""

EPILOG = """`%(prog)s legendre_fit` runs that scenario with its configs/legendre_fit.yaml.
A command line that names no command is a run: `%(prog)s --config X` is
`%(prog)s run --config X`.

example: %(prog)s --config configs/legendre_fit.yaml --device cpu
         %(prog)s sweep --config configs/lenet.yaml --seeds 0-4 --jobs 2"""


def parsers(prog: str) -> tuple[Parser, dict[str, Parser]]:
    """The top parser, whose help lists the commands, and each command's own parser."""
    top = Parser(prog=prog, usage=USAGE, epilog=EPILOG, allow_abbrev=False,
                 description="Run the autograd demos described by a YAML config.",
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(title="commands", dest="command", metavar="COMMAND",
                             required=True, prog=prog)
    commands = {}
    for name, c in COMMANDS.items():
        commands[name] = sub.add_parser(name, help=c.about, description=c.about,
                                        usage=c.usage, allow_abbrev=False)  # see spelled_out
        c.options(commands[name])
    return top, commands


# Parsing: the command named first, or a run.

REFUSAL = "{option}: an option of {owners}, not of {command} (see {prog} {command} --help)"
# the options of 0.1.0 that became commands: refused, naming the command
BECAME = {"--compare": "compare RUN_A RUN_B ...", "--aggregate": "aggregate DIR"}


def parse(argv: list[str], prog: str) -> argparse.Namespace:
    """`argv` as one command's options; an option of another command is a one-line error."""
    top, commands = parsers(prog)
    options = {name: p.option_names for name, p in commands.items()}
    known = set().union(*options.values())  # = every_option
    argv = spelled_out(argv, known)
    end = argv.index("--") if "--" in argv else len(argv)
    old = next((a.split("=", 1)[0] for a in argv[:end] if a.split("=", 1)[0] in BECAME), None)
    if old:
        raise ConfigError(f"{old}: an option of 0.1.0, now a command: {prog} {BECAME[old]}")
    args, extra = top.parse_known_args(spelled(argv))
    first = next((t for t in extra if t.startswith("-")), "")
    option = long_name(first, known)
    if option:
        owners = [name for name in options if option in options[name]]
        raise ConfigError(REFUSAL.format(option=option, owners=listed(owners),
                                         command=args.command, prog=prog))
    if extra:
        raise ConfigError(f"unrecognized arguments: {' '.join(extra)} (see --help)")
    return args


def every_option(prog: str = "runner.py") -> set[str]:
    """The names of every command's options."""
    return set().union(*(p.option_names for p in parsers(prog)[1].values()))


def spelled_out(argv: list[str], known: set[str]) -> list[str]:
    """`argv` with each abbreviated option written out, as one parser over every command's
    options reads it (`--conf` is --config; `--see` could be --seed or --seeds: an error), so
    that an abbreviation means the same whichever command it lands in."""
    out, end = list(argv), argv.index("--") if "--" in argv else len(argv)
    for i, token in enumerate(argv[:end]):
        name, eq, value = token.partition("=")
        if not name.startswith("--") or name in known:
            continue
        hits = sorted(o for o in known if o.startswith(name))
        if len(hits) > 1:
            raise ConfigError(f"ambiguous option: {name} could match {', '.join(hits)} "
                              f"(see --help)")
        if hits:
            out[i] = hits[0] + eq + value
    return out


def spelled(argv: list[str]) -> list[str]:
    """`argv` with its command first: as named, else run."""
    if argv and argv[0] in (*COMMANDS, "-h", "--help"):
        return argv
    if argv and not argv[0].startswith("-"):
        raise ConfigError(f"{argv[0]}: not a command{did_you_mean(argv[0], COMMANDS)}")
    return ["run", *argv]


def long_name(token: str, known: set[str]) -> str | None:
    """The option `token` names, as argparse reads it (a unique prefix will do); else None."""
    name = token.split("=", 1)[0]
    if not name.startswith("--") or name == "--":
        return None
    hits = [o for o in known if o.startswith(name)]
    return name if name in known else hits[0] if len(hits) == 1 else None


def listed(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


# What each command checks before any work: one line each.

def check_run(args: RunRequest) -> None:
    """run's options that only make sense together (--ensemble, --jobs), or never do."""
    for option in ("--baseline", "--save-baseline"):
        check_path(option, getattr(args, option[2:].replace("-", "_")))
    if args.save_baseline:  # before the run: a file it could write, of this kind of run
        from demos.lab.comparing.baseline import check_writable
        check_writable(args.save_baseline, args.config, args.output_dir, args.dry_run)
    if args.ensemble is not None:
        if not args.save_baseline:
            raise ConfigError("--ensemble: only with --save-baseline FILE (it measures the "
                              "baseline's bands)")
        for option, given in (("--baseline", args.baseline is not None),
                              ("--print-config", args.print_config), ("--open", args.open)):
            if given:
                raise ConfigError(f"--ensemble: not with {option}")
        one_process("--ensemble")
    elif args.jobs != 1:
        raise ConfigError("--jobs: only for a sweep or an --ensemble")
    if args.watch:
        for option, given in (("--ensemble", args.ensemble is not None),
                              ("--save-baseline", args.save_baseline), ("--open", args.open),
                              ("--run-name", args.run_name), ("--print-config", args.print_config)):
            if given:
                raise ConfigError(f"--watch: not with {option} (every rerun is a run of its "
                                  f"own)")
        one_process("--watch")
    check_jobs(args.jobs)
    check_run_name(args.run_name)


def check_sweep(args: argparse.Namespace) -> None:
    """sweep's options; a swept key may not also be fixed (one of them would silently win)."""
    check_path("--baseline", args.baseline)
    check_jobs(args.jobs)
    one_process("a sweep")
    swept = [a.partition("=")[0].strip() for a in args.sweep or []]
    swept += ["seed"] if args.seeds is not None else []
    fixed = {a.partition("=")[0].strip(): f"--set {a}" for a in args.sets}
    fixed.update({k: f"--{k} {v}" for k, v in (("seed", args.seed), ("device", args.device),
                                              ("threads", args.threads)) if v is not None})
    for key in swept:
        if key in fixed:
            raise ConfigError(f"--sweep {key}: also fixed by {fixed[key]}; sweep it or fix "
                              f"it, not both")
    check_run_name(args.run_name)


def check_path(option: str, path: str | None) -> None:
    if path == "":
        raise ConfigError(f"{option}: an empty path; name a file")


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= 256:
        raise ConfigError(f"--jobs: must be from 1 to 256, got {jobs}")


def one_process(what: str) -> None:
    from demos.lab.runner.torchrun import from_env
    if from_env().active:
        raise ConfigError(f"{what}: not under torchrun; run it as one process")


def check_run_name(name: str | None) -> None:
    if name is not None:
        from demos.lab.comparing.sweep import NAME_RE
        if not NAME_RE.fullmatch(name):
            raise ConfigError(f"--run-name {show(name)}: must be a folder-safe name "
                              f"(letters, digits, _ . = , + -; at most 100)")


def check_overrides(args: RunRequest | argparse.Namespace) -> None:
    """--device, --seed and --threads, before anything runs (a sweep passes them on)."""
    if args.device is not None and not DEVICE_RE.fullmatch(args.device):
        raise ConfigError(f"--device: must be auto, cpu, cuda, cuda:N or mps, "
                          f"got {show(args.device)}")
    if args.seed is not None and not 0 <= args.seed <= MAX_INT:
        raise ConfigError(f"--seed: must be from 0 to {MAX_INT:.0e}, got {args.seed}")
    if args.threads is not None and args.threads != "auto" and not (
            args.threads.isdigit() and 1 <= int(args.threads) <= 1024):
        raise ConfigError(f"--threads: must be auto or a number from 1 to 1024, got "
                          f"{show(args.threads)}")


def load_baseline(path: str | None, dry_run: bool):
    """--baseline's file, read and validated before any work."""
    if not path:
        return None
    from demos.lab.comparing import baseline
    base = baseline.read_baseline(path)
    if base.dry_run != dry_run:
        made, now = (("a --dry-run", "a full run") if base.dry_run else
                     ("a full run", "a --dry-run"))
        raise ConfigError(f"--baseline {path}: saved from {made}, this is {now}; "
                          f"their values cannot agree")
    return base


