"""What grading gives back, torch-free: Gradescope's tests, the graded submission
(GradeResult, `demos.grade`'s result and the command line's lines), and Ungradable."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from demos.lab.core.schema import ConfigError


class Ungradable(ConfigError):
    """A submission that cannot be graded (a syntax error, no such class, its import raising):
    one line, `file:line: what`; the command line's exit 2."""


@dataclass
class Test:
    """One of Gradescope's tests: name, points, what the student reads."""
    name: str
    max_score: float
    score: float = 0.0
    output: str = ""
    kind: str = ""  # the diagnosis's kind, for the teacher (and the tests)

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "score": self.score, "max_score": self.max_score,
                "output": self.output}

    def __repr__(self) -> str:
        return f"<{self.name}: {self.score:g}/{self.max_score:g}>"


@dataclass(repr=False)
class GradeResult:
    """A graded submission: its tests (points, what the student reads), the autograd calls
    flagged for the teacher, and the command line's exit code."""
    file: str
    tests: list[Test]
    flagged: str = ""  # the autograd calls found in backward, for the teacher
    cases: int = 0
    exercise: str = ""

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)

    @property
    def exit_code(self) -> int:
        """The command line's: 0 full marks, 1 fewer (or autograd flagged in backward)."""
        return 0 if self.score >= self.max_score and not self.flagged else 1

    @property
    def hints(self) -> dict[str, str]:
        """What each test that lost points says (its hints), by the test's name."""
        return {t.name: t.output for t in self.tests if not t.passed}

    def lines(self) -> list[str]:
        """What `autograd-demos grade` prints: the score, each test, what the failed ones
        say (the hints)."""
        out = [f"{self.file}: {self.score:g}/{self.max_score:g} points ({self.exercise}, "
               f"{self.cases} hidden cases)"]
        for t in self.tests:
            out.append(f"  {'ok  ' if t.passed else 'FAIL'} {t.score:g}/{t.max_score:g}  "
                       f"{t.name}")
            if not t.passed:
                out += [f"       {line}" for line in t.output.splitlines()]
        return out

    def to_json(self) -> dict[str, Any]:
        """Gradescope's results.json."""
        head = f"{self.score:g}/{self.max_score:g} points on {self.cases} hidden cases."
        return {"score": self.score, "output": head + (f" {self.flagged}" if self.flagged
                                                        else ""),
                "tests": [t.to_json() for t in self.tests]}

    def __repr__(self) -> str:
        return "\n".join([*self.lines(), *([self.flagged] if self.flagged else [])])
