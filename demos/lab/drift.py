"""Values of two runs compared within tolerances: shared by --baseline, --compare and sweeps.

Torch-free. A value is a scenario entry's final metric or param, named `metrics.<name>` or
`params.<name>`. Its tolerance comes from the most specific key that sets one: the value's own
name, then its kind (`metrics`, `params`), then `all`; at the same key, the first table given
wins (the config before the baseline file). Unset: the default, tight where both runs are on
the CPU (bit-identical there at the same thread count), looser elsewhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from demos.lab.schema import ConfigError, did_you_mean, param

KINDS = ("metrics", "params")
CPU_DEFAULT = (1e-6, 1e-9)     # rtol, atol: same machine, same threads: the same bits
OTHER_DEFAULT = (1e-4, 1e-6)   # GPU kernels (atomics, TF32, cuDNN's choices) move last digits


@dataclass
class Tolerance:
    """How far a value may move: |new - old| <= atol + rtol * |old|."""
    rtol: float | None = param(None, "relative tolerance; unset: the default (1e-6 on the CPU, "
                                     "1e-4 elsewhere)", ge=0)
    atol: float | None = param(None, "absolute tolerance; unset: the default (1e-9 on the CPU, "
                                     "1e-6 elsewhere)", ge=0)


Tolerances = Mapping[str, Tolerance]  # {"all" | "metrics" | "params" | "metrics.<name>": ...}


def check_keys(table: Tolerances, known: Mapping[str, Sequence[str]], where: str) -> None:
    """Every key of a tolerance table names `all`, a kind, or a value the scenario reports."""
    names = ["all", *KINDS, *(f"{k}.{n}" for k in KINDS for n in known.get(k, ()))]
    for key in table:
        if key not in names:
            kind = key.partition(".")[0]
            close = [n for n in names if n.startswith(kind + ".")] if kind in KINDS else names
            raise ConfigError(f"{where}.{key}: not a value of this scenario; use all, metrics, "
                              f"params, metrics.<name> or params.<name>"
                              f"{did_you_mean(key, close or names)}")


def resolve(key: str, tables: Sequence[Tolerances], cpu: bool) -> tuple[float, float]:
    """(rtol, atol) for the value `key` ('metrics.final_loss'): each unset field from the next
    less specific key, then the default."""
    rtol = atol = None
    for k in (key, key.split(".", 1)[0], "all"):
        for table in tables:
            t = table.get(k)
            if t is not None:
                rtol = t.rtol if rtol is None else rtol
                atol = t.atol if atol is None else atol
    default = CPU_DEFAULT if cpu else OTHER_DEFAULT
    return (default[0] if rtol is None else rtol), (default[1] if atol is None else atol)


@dataclass
class Drift:
    """One value of one entry, old against new; `old` or `new` None when only one side has it
    (a non-finite value is NaN here: summary.json writes it as null)."""
    entry: str
    key: str                 # metrics.<name> | params.<name>
    old: float | None
    new: float | None
    rtol: float
    atol: float

    @property
    def missing(self) -> bool:
        return self.old is None or self.new is None

    @property
    def diff(self) -> float:
        return math.nan if self.missing else self.new - self.old

    @property
    def allowed(self) -> float:
        return self.atol + self.rtol * abs(self.old or 0.0)

    @property
    def within(self) -> bool:
        if self.missing:
            return False
        if math.isnan(self.old) or math.isnan(self.new):
            return math.isnan(self.old) and math.isnan(self.new)
        return abs(self.diff) <= self.allowed

    @property
    def moved(self) -> bool:
        """Anything but the same number (NaN and NaN are the same here)."""
        return self.missing or not (self.old == self.new or
                                    (math.isnan(self.old) and math.isnan(self.new)))

    @property
    def severity(self) -> float:
        """How far out, in units of the allowed difference: sorts the worst first."""
        if self.missing or math.isnan(self.diff):
            return math.inf
        return abs(self.diff) / self.allowed if self.allowed else (math.inf if self.diff else 0)

    def describe(self) -> str:
        if self.old is None:
            return f"new {num(self.new)}, not in the baseline"
        if self.new is None:
            return f"old {num(self.old)}, not produced now"
        return (f"old {num(self.old)}, new {num(self.new)}, diff {self.diff:+.3g} "
                f"(allowed {self.allowed:.3g}: rtol {self.rtol:g}, atol {self.atol:g})")

    def to_json(self) -> dict:
        def plain(x: float | None) -> float | str | None:  # strict JSON: NaN as a string
            return x if x is None or math.isfinite(x) else str(x)

        return {"entry": self.entry, "key": self.key, "old": plain(self.old),
                "new": plain(self.new), "diff": plain(None if self.missing else self.diff),
                "allowed": plain(self.allowed), "within": self.within}


def num(x: float | str | None) -> str:
    """A value for a message; "nan" and "inf" arrive as strings from strict JSON."""
    return "none" if x is None else f"{x:.10g}" if isinstance(x, (int, float)) else str(x)


def as_float(x: object) -> float:
    """A value read back from summary.json or a baseline: null (non-finite) is NaN."""
    if x is None:
        return math.nan
    try:
        return float(x)
    except OverflowError:  # an integer beyond any float
        return math.inf if x > 0 else -math.inf


def compare_values(entry: str, old: Mapping[str, Mapping[str, object]],
                   new: Mapping[str, Mapping[str, object]], tables: Sequence[Tolerances],
                   cpu: bool) -> list[Drift]:
    """Every metric and param of one entry, in either `old` or `new` ({kind: {name: value}})."""
    out = []
    for kind in KINDS:
        a, b = old.get(kind) or {}, new.get(kind) or {}
        for name in [*a, *(n for n in b if n not in a)]:
            key = f"{kind}.{name}"
            rtol, atol = resolve(key, tables, cpu)
            out.append(Drift(entry, key, as_float(a[name]) if name in a else None,
                             as_float(b[name]) if name in b else None, rtol, atol))
    return out
