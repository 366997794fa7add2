"""`autograd-demos exercise NAME --output-dir DIR` and `autograd-demos grade FILE [--results
results.json]`: the exercise kit's words of the one command line (demos.cli hands them here;
the parser is the run's, options.Parser, whose errors are one line). Exit codes: exercise 0
written, 2 bad input; grade 0 full marks, 1 fewer, 2 a submission or grading.yaml that cannot
be graded."""
from __future__ import annotations

import os

from demos.lab.core.console import say
from demos.lab.core.results import EXIT_USAGE
from demos.lab.core.schema import ConfigError
from demos.lab.runner.options import Parser


def parser(prog: str, command: str) -> Parser:
    from demos.exercise.table import DOCUMENTS

    if command == "exercise":
        p = Parser(prog=f"{prog} exercise", description=(
            "Write a student's exercise: exercise.py (forward given, backward to write) and "
            "grading.yaml (the teacher's: points, hints, hidden seeds and shapes)."))
        p.add_argument("name", metavar="NAME", help=f"a document's Function ("
                       f"{', '.join(DOCUMENTS)}) or a config whose custom_function entries "
                       "name one (e.g. configs/examples/cube_ok.yaml)")
        p.add_argument("--output-dir", metavar="DIR", required=True,
                       help="where exercise.py and grading.yaml go (several entries: a folder "
                            "each, by id)")
        return p
    p = Parser(prog=f"{prog} grade", description=(
        "Grade a submission on the hidden inputs of its grading.yaml; exit 0 full marks, 1 "
        "fewer, 2 cannot be graded."))
    p.add_argument("file", metavar="FILE", help="the submission: the student's exercise.py")
    p.add_argument("--grading", metavar="YAML",
                   help="the exercise's grading.yaml (default: the one beside FILE)")
    p.add_argument("--results", metavar="JSON",
                   help="also write the results in Gradescope's format (results.json)")
    return p


def main(argv: list[str], prog: str) -> int:
    """The command `argv[0]` (exercise or grade) with its arguments; the exit code."""
    try:
        args = parser(prog, argv[0]).parse_args(argv[1:])
        return exercise(args.name, args.output_dir) if argv[0] == "exercise" else \
            grade(args.file, args.grading, args.results)
    except ConfigError as e:
        say(f"error: {e}", err=True)
        return EXIT_USAGE


def exercise(name: str, output_dir: str) -> int:
    from demos.exercise.make import write

    for path in write(name, output_dir):
        say(f"wrote {path}")
    return 0


def grade(file: str, grading: str | None, results: str | None) -> int:
    from demos.exercise import spec
    from demos.exercise.grade import Ungradable, grade, load_reference, main_score
    from demos.lab.core.files import dumps

    grading = grading or os.path.join(os.path.dirname(file) or ".", "grading.yaml")
    g = spec.read(grading)
    reference = load_reference(g, grading)
    try:
        outcome = grade(file, g, reference)
    except Ungradable as e:
        say(f"error: {e}", err=True)
        if results:
            write(results, dumps({"score": 0.0, "output": f"cannot be graded: {e}",
                                  "tests": []}))
        return EXIT_USAGE
    say(f"{file}: {outcome.score:g}/{outcome.max_score:g} points ({g.exercise}, "
        f"{outcome.cases} hidden cases)")
    for t in outcome.tests:
        mark = "ok  " if t.score >= t.max_score else "FAIL"
        say(f"  {mark} {t.score:g}/{t.max_score:g}  {t.name}")
        if t.score < t.max_score:
            for line in t.output.splitlines():
                say(f"       {line}")
    if outcome.flagged:
        say(outcome.flagged, err=True)
    if results:
        write(results, dumps(outcome.to_json()))
    return main_score(outcome)


def write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise ConfigError(f"--results {path}: cannot write it: {e.strerror or e}") from None
