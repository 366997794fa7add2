"""The tolerance model: how far a value may move between two runs, for --baseline and the
config's `expect:` alike. Torch-free. Its rules, the first that applies (set, band, same
machine, arithmetic; no rule but `exact` tighter than GPU), and why: demos/docs/reproducible.md,
"One tolerance model"; which `tolerance:` key wins: demos/docs/baselines.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, Mapping, Sequence

from demos.lab.core.files import strict
from demos.lab.core.schema import ConfigError, did_you_mean, param

KINDS = ("metrics", "params")
SAME_MACHINE = (1e-6, 1e-9)   # rtol, atol: same fingerprint: the same bits
ARITHMETIC = (1e-5, 1e-9)     # across machines, for values no training amplifies; the floor
GPU = (1e-4, 1e-6)            # the least either is on a GPU
WIDEN = 3                     # a band: this many times the range an ensemble saw
# and within a run, how close two computations of one result are (rtol, atol), by their kind
# (checks.md):
FLOAT64_TOL = (1e-7, 1e-9)     # float64 against float64, the same maths another way (parity, the
#                            support rows, forward mode's J·v, the second backward)
REFERENCE_TOL = (1e-6, 1e-8)   # the diagnosis's patterns and the grader, against a reference
NUMERICAL_TOL = (1e-3, 1e-5)   # against finite differences, as gradcheck compares (their rounding)
FLOAT32_TOL = (1e-4, 1e-5)     # float32 against float64: what float32 rounding allows


@dataclass
class Tolerance:
    """How far a value may move: |new - old| <= atol + rtol * |old|, or, with `ratio`, new / old
    within [1/ratio, ratio] (both positive)."""
    rtol: float | None = param(None, "relative tolerance; unset: the tier's (1e-6 on the same "
                                     "machine, 1e-5 across machines, 1e-4 on a GPU)", ge=0)
    atol: float | None = param(None, "absolute tolerance; unset: the tier's (1e-9; 1e-6 on a "
                                     "GPU)", ge=0)
    ratio: float | None = param(None, "for positive values: new / old may lie within "
                                      "[1/ratio, ratio] (log space)", ge=1)


# a tolerance table's entry: a Tolerance, or "exact": the same bits, where the fingerprints match
TableEntry = Tolerance | Literal["exact"]
Tolerances = Mapping[str, TableEntry]  # {"all" | "metrics" | "params" | "metrics.<name>": ...}


@dataclass
class Band:
    """A value's spread over an ensemble (n runs, min, max), and the tolerance derived from it
    by `measure` (written so that a reader sees what is allowed; editable like any tolerance)."""
    n: int = param(1, "runs of the ensemble with a finite value", ge=1)
    min: float = param(0.0, "the lowest value the ensemble saw")
    max: float = param(0.0, "the highest value the ensemble saw")
    rtol: float = param(ARITHMETIC[0], "relative tolerance", ge=0)
    atol: float = param(ARITHMETIC[1], "absolute tolerance", ge=0)
    ratio: float | None = param(None, "new / old within [1/ratio, ratio] (positive values)",
                                ge=1)

    def validate(self, where: str) -> None:
        if self.min > self.max:
            raise ConfigError(f"{where}: min {self.min} is above max {self.max}")


def up(x: float, digits: int = 3) -> float:
    """`x` rounded up to `digits` significant digits: readable, never tighter."""
    if x <= 0 or not math.isfinite(x):
        return x
    scale = 10 ** (digits - 1 - math.floor(math.log10(x)))
    return math.ceil(x * scale * (1 - 1e-12)) / scale


def measure(values: Sequence[float]) -> Band | None:
    """The band of a value from its ensemble (the reference's value among them); None when no
    value is finite."""
    xs = [x for x in values if x is not None and math.isfinite(x)]
    if not xs:
        return None
    lo, hi = min(xs), max(xs)
    ratio = math.exp(WIDEN * math.log(hi / lo)) if lo > 0 else 1.0
    if ratio - 1 > ARITHMETIC[0]:  # positive throughout, and it moved more than the floor
        return Band(len(xs), lo, hi, ARITHMETIC[0], ARITHMETIC[1], 1 + up(ratio - 1))
    return Band(len(xs), lo, hi, ARITHMETIC[0], up(max(WIDEN * (hi - lo), ARITHMETIC[1])))


@dataclass(frozen=True)
class Rule:
    """The tolerance a value was judged by, and which tier of the model gave it."""
    tier: str                  # exact | set | band | same machine | arithmetic
    rtol: float
    atol: float
    ratio: float | None = None
    why: str = ""              # e.g. the band's evidence, or why `exact` did not apply

    def describe(self) -> str:
        parts = [f"ratio {self.ratio:.10g}"] if self.ratio else []
        parts.append(f"rtol {self.rtol:g}, atol {self.atol:g}")
        return f"{self.tier}: " + " or ".join(parts) + (f"; {self.why}" if self.why else "")


def within(old: float, new: float, rtol: float, atol: float, ratio: float | None = None) -> bool:
    """|new - old| <= atol + rtol * |old|, or both positive and new / old within [1/ratio, ratio].
    NaN is within only of NaN."""
    if math.isnan(old) or math.isnan(new):
        return math.isnan(old) and math.isnan(new)
    if old == new or abs(new - old) <= atol + rtol * abs(old):  # ==: the same infinity
        return True
    return ratio is not None and ratio > 0 and old > 0 and new > 0 and \
        max(new / old, old / new) <= ratio


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


def written(key: str, tables: Sequence[Tolerances]) -> Tolerance | Literal["exact"] | None:
    """What the tables say of `key`: the fields set, each from its most specific key (then the
    first table); "exact" when the most specific key that says anything says that."""
    found: dict[str, float] = {}
    for k in (key, key.split(".", 1)[0], "all"):
        for table in tables:
            t = table.get(k)
            if t == "exact" and not found:
                return "exact"
            if isinstance(t, Tolerance):
                for field in ("rtol", "atol", "ratio"):
                    if getattr(t, field) is not None:
                        found.setdefault(field, getattr(t, field))
    return Tolerance(**found) if found else None


def rule_for(key: str, tables: Sequence[Tolerances], *, same_machine: bool, cpu: bool = True,
            band: Band | None = None, differ: str = "") -> Rule:
    """The rule for value `key` ('metrics.final_loss'): see the module's docstring. `differ`
    says how the fingerprints differ, for the checks' words."""
    tier = Rule("same machine", *SAME_MACHINE) if same_machine else Rule(
        "arithmetic", *ARITHMETIC, why=f"fingerprints differ ({differ})" if differ else "")
    said = written(key, tables)
    if said == "exact" and same_machine:
        rule = Rule("exact", 0.0, 0.0)
    elif isinstance(said, Tolerance):
        rule = Rule("set", tier.rtol if said.rtol is None else said.rtol,
                    tier.atol if said.atol is None else said.atol, said.ratio)
    elif band is not None:
        rule = Rule("band", band.rtol, band.atol, band.ratio,
                    f"{band.n} runs saw {band.min:.6g} to {band.max:.6g}")
    else:
        rule = tier
    if said == "exact" and not same_machine:
        rule = replace(rule, why="exact applies only where the fingerprints match" +
                       (f" ({differ})" if differ else "") + (f"; {rule.why}" if rule.why else ""))
    if not cpu and rule.tier != "exact":  # GPU kernels: no tighter than this
        rule = replace(rule, rtol=max(rule.rtol, GPU[0]), atol=max(rule.atol, GPU[1]))
    return rule


@dataclass
class Drift:
    """One value of one entry, old against new; `old` or `new` None when only one side has it
    (a non-finite value is NaN here: summary.json writes it as null)."""
    entry: str
    key: str                 # metrics.<name> | params.<name>
    old: float | None
    new: float | None
    rule: Rule

    @property
    def missing(self) -> bool:
        return self.old is None or self.new is None

    @property
    def diff(self) -> float:
        return math.nan if self.old is None or self.new is None else self.new - self.old

    @property
    def allowed(self) -> float:
        """The largest difference the rule allows in the direction the value moved."""
        r, old = self.rule, self.old or 0.0
        linear = r.atol + r.rtol * abs(old)
        if r.ratio and old > 0 and not math.isnan(self.diff):
            return max(linear, old * (r.ratio - 1) if self.diff >= 0 else old * (1 - 1 / r.ratio))
        return linear

    @property
    def within(self) -> bool:
        r = self.rule
        return (self.old is not None and self.new is not None
                and within(self.old, self.new, r.rtol, r.atol, r.ratio))

    @property
    def moved(self) -> bool:
        """Anything but the same number (NaN and NaN are the same here: see `within`)."""
        return self.old is None or self.new is None or not within(self.old, self.new, 0, 0)

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
                f"(allowed {self.allowed:.3g}: {self.rule.describe()})")

    def to_json(self) -> dict:
        return strict({"entry": self.entry, "key": self.key, "old": self.old, "new": self.new,
                       "diff": None if self.missing else self.diff, "allowed": self.allowed,
                       "within": self.within, "tier": self.rule.tier,
                       "rule": self.rule.describe()})  # strict JSON: NaN as a string


def num(x: float | str | None) -> str:
    """A value for a message; "nan" and "inf" arrive as strings from strict JSON."""
    return "none" if x is None else f"{x:.10g}" if isinstance(x, (int, float)) else str(x)


def as_float(x: object) -> float:
    """A value read back from a baseline or summary.json: null (non-finite) is NaN."""
    return math.nan if x is None else float(x)  # type: ignore[arg-type]


def compare_values(entry: str, old: Mapping[str, Mapping[str, object]],
                   new: Mapping[str, Mapping[str, object]], tables: Sequence[Tolerances], *,
                   same_machine: bool, cpu: bool = True,
                   bands: Mapping[str, Band] | None = None, differ: str = "") -> list[Drift]:
    """Every metric and param of one entry, in either `old` or `new` ({kind: {name: value}})."""
    out = []
    for kind in KINDS:
        a, b = old.get(kind) or {}, new.get(kind) or {}
        for name in [*a, *(n for n in b if n not in a)]:
            key = f"{kind}.{name}"
            rule = rule_for(key, tables, same_machine=same_machine, cpu=cpu,
                           band=(bands or {}).get(key), differ=differ)
            out.append(Drift(entry, key, as_float(a[name]) if name in a else None,
                             as_float(b[name]) if name in b else None, rule))
    return out
