"""`autograd-demos exercise NAME --output-dir DIR` and `autograd-demos grade FILE [--results
results.json]`: the exercise kit's words of the one command line (demos.cli hands them here;
the parser is the run's, options.Parser, whose errors are one line). Exit codes: exercise 0
written, 2 bad input; grade 0 full marks, 1 fewer, 2 a submission or grading.yaml that cannot
be graded."""
from __future__ import annotations

from demos.lab.core.console import say
from demos.lab.core.results import EXIT_USAGE
from demos.lab.core.schema import ConfigError
from demos.lab.runner.options import Parser


def parser(prog: str, command: str) -> Parser:
    from demos.exercises.table import DOCUMENTS

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
    from demos.exercises.make import write

    for path in write(name, output_dir):
        say(f"wrote {path}")
    return 0


def grade(file: str, grading: str | None, results: str | None) -> int:
    from demos.exercises.grade import grade_file

    result = grade_file(file, grading, results)  # Ungradable, a ConfigError: main says it
    for line in result.lines():
        say(line)
    if result.flagged:
        say(result.flagged, err=True)
    return result.exit_code
