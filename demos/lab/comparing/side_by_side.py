"""Run folders compared: `python runner.py compare RUN_A RUN_B [RUN_C ...]`.

The first run is the reference. Prints every metric and param of the other runs that moved
beyond its tolerance (demos.lab.core.tolerance), and writes compare.html (laid out by
demos.lab.pages.compare), compare.json and the overlaid loss curves into a new
`compare_<time>` folder in --output-dir. Torch-free; matplotlib loads only to draw.
Its lines go through `console.say` (escaped; a reader gone away changes no exit code), and the
folder is written whole or not at all.
"""
from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from demos.lab.comparing.aggregate import elsewhere, not_numbers, number, process_state, short
from demos.lab.core import fingerprint as fp
from demos.lab.core.config import ID_RE
from demos.lab.core.console import say, shown
from demos.lab.core.files import NotReadable, read_bytes, write_atomic, write_json
from demos.lab.core.layout import (
    COMPARE_PAGE,
    COMPARISON,
    CONFIG,
    METRICS,
    SUMMARY,
    make_run_dir,
    read_run,
)
from demos.lab.core.safe_yaml import parse_yaml
from demos.lab.core.schema import ConfigError, convert
from demos.lab.core.tolerance import KINDS, Band, Drift, TableEntry, compare_values, num
from demos.lab.pages import compare as page
from demos.lab.pages.plots import overlay_plot, read_losses

MAX_CONFIG_TEXT = 4 << 20  # a run's resolved config.yaml: its config (at most 1 MiB), resolved


@dataclass
class RunFolder:
    """One run folder: its summary.json, its config.yaml's text, its entries by id."""
    dir: Path
    label: str  # the folder's name; the path as given where names repeat
    summary: dict[str, Any]
    config: str

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        return {str(e.get("id")): e for e in self.summary.get("scenarios", [])}

    @property
    def state(self) -> tuple[str, str | None]:
        """Its status, "stopped" for a "running" one whose process is gone; and a line that
        says so for a run that did not finish."""
        s, status = self.summary, str(self.summary.get("status", "?"))
        if status == "interrupted":
            return status, f"{self.label}: interrupted: its values are those of the entries it ran"
        if status != "running":
            return status, None
        state = process_state(s)
        if state == "alive":
            return status, (f"{self.label}: still running (process {s.get('pid')}): its values "
                            f"so far, of the entries done")
        if state == "gone":
            return "stopped", (f"{self.label}: stopped before it finished (its summary says "
                               f"running; its process is gone): its values are those of the "
                               f"entries done")
        return status, (f"{self.label}: its summary says running{elsewhere(s)}: still "
                        f"running, or stopped (cannot be told from here); its values are those "
                        f"of the entries done")


@dataclass
class SideBySide:
    """Every run against the first: each value of the entries both have, and the entries
    that not every run has."""
    runs: list[RunFolder]
    drifts: list[list[Drift]]   # one list per run after the first
    only: dict[str, list[str]]  # entry id -> the labels of the runs that have it
    notes: list[str] = field(default_factory=list)  # what the verdict rests on (--baseline)

    @property
    def corrupt(self) -> dict[str, list[str]]:
        """By run label: the values of its summary.json that are not numbers (judged missing)."""
        return {r.label: bad for r in self.runs if (bad := not_numbers(r.summary))}

    @property
    def differences(self) -> list[tuple[str, Drift]]:
        return [(run.label, d) for run, drifts in zip(self.runs[1:], self.drifts)
                for d in drifts if not d.within]

    @property
    def agree(self) -> bool:
        return not self.differences and not self.only


def compare_runs(run_dirs: list[Path], output_dir: Path, baseline: str | None = None,
                 keep: Callable[[Compared], None] | None = None) -> int:
    """Compare the runs in `run_dirs` with the first; print what differs beyond tolerance and
    write compare.html and compare.json into a new folder in `output_dir`. Returns 0 when
    they agree, 1 when not; raises ConfigError (nothing written) for anything not a run.
    `baseline`: a baseline file whose tolerances and measured bands judge the values; `keep`
    is handed the comparison made (demos.compare: its inline view)."""
    runs = load_runs(run_dirs)
    tables, bands, notes = tolerance_tables(runs[0]), {}, []
    if baseline is not None:
        from demos.lab.comparing.baseline import read_baseline
        base = read_baseline(baseline)
        for i, e in base.scenarios.items():
            tables.setdefault(i, []).extend([e.tolerance, base.tolerance])
            bands[i] = e.band
        notes += baseline_note(baseline, entry_ids(runs), set(base.scenarios))
    c = compare(runs, tables, bands)
    c.notes = notes
    out = make_run_dir(output_dir, datetime.now(), prefix="compare_")
    try:
        plots = draw_losses(runs, out)
        write_json(out / COMPARISON, to_json(c))
        write_atomic(out / COMPARE_PAGE, render(c, out, plots))
    except OSError as e:  # a full disk, a folder made read-only: no half-made comparison
        shutil.rmtree(out, ignore_errors=True)
        raise ConfigError(f"--output-dir {output_dir}: cannot write {out.name} "
                          f"({e.strerror or e}); nothing kept") from None
    for line in console_text(c).splitlines():
        say(line)
    say(str(out / COMPARE_PAGE))
    if keep is not None:
        keep(Compared(out, c, plots))
    return 0 if c.agree else 1


@dataclass
class Compared:
    """A comparison made: its folder, what it found, its plots (by entry)."""
    folder: Path
    found: SideBySide
    plots: dict[str, str]

    def html(self, part: str | None = None) -> str:
        """compare.html's text, or one block of it."""
        return render(self.found, self.folder, self.plots, part)

    def to_json(self) -> dict[str, Any]:
        """compare.json's data."""
        return to_json(self.found)


def baseline_note(path: str, entries: list[str], held: set[str]) -> list[str]:
    """A line when the baseline holds no tolerances or bands for some compared entries (they
    are judged by the tiers), or for none of them."""
    lacking = [i for i in entries if i not in held]
    if not lacking:
        return []
    if len(lacking) == len(entries):
        return [f"--baseline {path}: holds none of the compared entries ({', '.join(lacking)}): "
                f"its tolerances applied to none of them; each value was judged by its tier"]
    return [f"--baseline {path}: holds no entry {', '.join(lacking)}: its tolerances applied "
            f"to the others; {'that one was' if len(lacking) == 1 else 'those were'} judged by "
            f"the tiers"]


def load_runs(run_dirs: list[Path]) -> list[RunFolder]:
    """The run folders, checked: at least two, each once, each with a run's summary.json."""
    if len(run_dirs) < 2:
        raise ConfigError(f"compare: needs two run folders or more, got {len(run_dirs)}")
    seen: dict[Path, Path] = {}
    for path in run_dirs:
        why = ("no such folder" if not path.exists() else "not a folder" if not path.is_dir()
               else "no readable summary.json: not a run folder"
               if "run_id" not in (read_run(path / SUMMARY) or {}) else None)
        if why:
            raise ConfigError(f"compare {path}: {why}")
        if path.resolve() in seen:
            raise ConfigError(f"compare {path}: the same folder as {seen[path.resolve()]}")
        seen[path.resolve()] = path
    names = [p.name for p in run_dirs]
    return [RunFolder(p, p.name if names.count(p.name) == 1 else str(p),
                      read_run(p / SUMMARY) or {},  # (each was read above)
                      read_text(p / CONFIG)) for p in run_dirs]


def read_text(path: Path) -> str:
    """A run's config.yaml's text; "" when it has none (older runs). One that cannot be read
    whole (a FIFO, a device, over 4 MiB, unreadable) is bad input: never read, never blocks."""
    if not path.exists() and not path.is_symlink():
        return ""
    try:
        return read_bytes(path, MAX_CONFIG_TEXT).decode("utf-8", errors="replace")
    except NotReadable as e:
        raise ConfigError(f"compare {path}: {e}; not a run's config") from None


def tolerance_tables(run: RunFolder) -> dict[str, list[dict[str, TableEntry]]]:
    """Each entry's `tolerance:` table in the run's config.yaml (absent in older runs)."""
    where = run.dir / CONFIG
    if not run.config.strip():  # an older run without config.yaml
        return {}
    cfg = parse_yaml(run.config.encode("utf-8"), str(where)) or {}  # nesting, bombs: one line
    entries = cfg.get("scenarios") if isinstance(cfg, dict) else None
    tables = {}
    for i, e in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(e, dict) and e.get("tolerance") is not None:
            tables[str(e.get("id"))] = [convert(dict[str, TableEntry], e["tolerance"],
                                                f"{where}: scenarios[{i}].tolerance")]
    return tables


def values(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An entry's numbers by kind ({"metrics": {...}, "params": {...}}); others left out."""
    return {kind: {k: v for k, v in mapping(entry.get(kind)).items()
                   if v is None or isinstance(v, (int, float))} for kind in KINDS}


def mapping(d: Any) -> dict[str, Any]:
    """A summary's metrics or params as a mapping; {} when they are something else."""
    return d if isinstance(d, dict) else {}


def entry_ids(runs: list[RunFolder]) -> list[str]:
    """Every entry id of the runs, in order of first appearance."""
    return list(dict.fromkeys(i for r in runs for i in r.entries))


def compare(runs: list[RunFolder], tables: dict[str, list[dict[str, TableEntry]]],
            bands: dict[str, dict[str, Band]] | None = None) -> SideBySide:
    """Each run's values against the first's, within `tables` (by entry id), the measured
    `bands` (by entry id, then value), or the tier their fingerprints give
    (demos.lab.core.tolerance)."""
    cpu = all(r.summary.get("device") == "cpu" for r in runs)
    ref = runs[0].entries
    drifts = []
    for r in runs[1:]:
        a, b = runs[0].summary.get("fingerprint"), r.summary.get("fingerprint")
        same, differ = fp.matches(a, b), fp.contrast(a, b, runs[0].label, r.label)
        drifts.append([d for i, e in ref.items() if i in r.entries
                       for d in compare_values(i, values(e), values(r.entries[i]),
                                               tables.get(i, []), same_machine=same, cpu=cpu,
                                               bands=(bands or {}).get(i), differ=differ)])
    only = {i: [r.label for r in runs if i in r.entries] for i in entry_ids(runs)
            if not all(i in r.entries for r in runs)}
    return SideBySide(runs, drifts, only)


def machines(c: SideBySide) -> list[str]:
    """A line per run whose fingerprint differs from the first's: how."""
    a = c.runs[0].summary.get("fingerprint")
    return [f"not the same machine: {text}" for r in c.runs[1:]
            if (text := fp.contrast(a, r.summary.get("fingerprint"), c.runs[0].label, r.label))]


def console_text(c: SideBySide) -> str:
    """The values beyond tolerance as an aligned table, the entries not in every run, and
    the verdict."""
    order, by_label = entry_ids(c.runs), {r.label: r for r in c.runs}
    rows: list[tuple[str, ...]] = [
        (label, d.entry, d.key, shown_value(c.runs[0], d.entry, d.key, d.old),
         shown_value(by_label[label], d.entry, d.key, d.new), "" if d.missing else
         f"{d.diff:+.3g}", f"{d.allowed:.3g}", d.rule.tier)
        for label, d in sorted(c.differences, key=lambda x: order.index(x[1].entry))]
    rows = [("run", "entry", "value", "old", "new", "diff", "allowed", "by"), *rows] if rows \
        else []
    rows = [tuple(shown(v, sys.stdout) for v in r) for r in rows]  # padded as the console shows
    widths = [max((len(r[k]) for r in rows), default=0) for k in range(8)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines += [f"{i}: only in {', '.join(labels)}" for i, labels in c.only.items()]
    return "\n".join([*lines, *corrupt_lines(c), *machines(c), *unfinished(c),
                      *(f"note: {n}" for n in c.notes), verdict(c)])


def shown_value(run: RunFolder, entry: str, key: str, value: float | None) -> str:
    """A value of a run as the table shows it: "none" when the run has none, and a value
    that is not a number (a corrupt summary.json) as such."""
    kind, _, name = key.partition(".")
    found = run.entries.get(entry, {}).get(kind)
    raw = found.get(name) if isinstance(found, dict) else None
    if value is None and isinstance(found, dict) and name in found and not number(raw):
        return f"not a number ({short(raw)})"
    return num(value)


def corrupt_lines(c: SideBySide) -> list[str]:
    """A line per run whose summary.json holds values that are not numbers."""
    return [f"{label}: summary.json is corrupt: {'; '.join(bad)}"
            for label, bad in c.corrupt.items()]


def unfinished(c: SideBySide) -> list[str]:
    """A line per run that did not finish: still running, stopped, interrupted."""
    return [note for r in c.runs if (note := r.state[1])]


def verdict(c: SideBySide) -> str:
    """One line: whether the runs agree with the first, or how much differs."""
    n, ref = len(c.runs), c.runs[0].label
    if c.agree:
        return f"{n} runs agree within tolerance (reference {ref})"
    differ = len({label for label, _ in c.differences})
    return (f"{n} runs compared with {ref}: {len(c.differences)} value(s) beyond tolerance in "
            f"{differ} run(s), {len(c.only)} entr{'y' if len(c.only) == 1 else 'ies'} not in "
            f"every run")


def to_json(c: SideBySide) -> dict[str, Any]:
    """compare.json: the runs, each value beyond tolerance, the entries not in every run."""
    return {"agree": c.agree, "reference": c.runs[0].label,
            "runs": [{"label": r.label, "path": str(r.dir), **run_info(r)} for r in c.runs],
            "differences": [{"run": label, **d.to_json()} for label, d in c.differences],
            "only_in": c.only, "corrupt": c.corrupt, "notes": c.notes}


def run_info(r: RunFolder) -> dict[str, Any]:
    """What the page shows of a run, from its summary.json."""
    s, det = r.summary, r.summary.get("determinism")
    return {"run_id": s.get("run_id"), "status": r.state[0],
            "config": s.get("config"), "torch": s.get("torch"), "device": s.get("device"),
            "seed": s.get("seed"), "threads": det.get("cpu_threads") if isinstance(det, dict)
            else None, "sets": s.get("sets"), "fingerprint": s.get("fingerprint")}


def what_differs(runs: list[RunFolder]) -> dict[str, str]:
    """A legend label for each run (by its label): what sets it apart from the others, its
    --set values and seed that not every run shares, keys shortened to their last part
    (`lr=1e-5`); the run's own label where nothing does, or where two runs would read the
    same."""
    def said(r: RunFolder) -> list[str]:
        sets = r.summary.get("sets")
        items = [str(x) for x in sets] if isinstance(sets, list) else []
        return items + [f"seed={r.summary.get('seed')}"]

    every = [said(r) for r in runs]
    common = set.intersection(*map(set, every)) if every else set()

    def labels(short: bool) -> dict[str, str]:
        out = {}
        for r, items in zip(runs, every):
            own = [f"{k.rsplit('.', 1)[-1] if short else k}{sep}{v}" for k, sep, v in
                   (x.partition("=") for x in items if x not in common)]
            text = ""
            for item in own:  # whole items, up to about 60 characters
                if text and len(text) + len(item) > 60:
                    text += ", ..."
                    break
                text += (", " if text else "") + item
            out[r.label] = text or r.label
        return out

    out = labels(short=True)
    if len(set(out.values())) < len(out):  # the short keys lose what sets them apart
        out = labels(short=False)
    if len(set(out.values())) < len(out):  # two runs still read the same: say which is which
        out = {label: label if text == label else f"{text} ({label})"
               for label, text in out.items()}
    return out


def draw_losses(runs: list[RunFolder], out: Path) -> dict[str, str]:
    """A PNG per entry with a metrics.csv in any run, each run's loss curve overlaid; their
    file names by entry id."""
    names, labels = {}, what_differs(runs)
    for entry in filter(ID_RE.fullmatch, entry_ids(runs)):
        curves = {labels[r.label]: read_losses(r.dir / entry / METRICS) for r in runs
                  if entry in r.entries and (r.dir / entry / METRICS).is_file()}
        drawn = {label: xy for label, xy in curves.items() if xy}
        if drawn:
            try:
                overlay_plot(out / f"{entry}_loss.png", drawn, title=f"{entry}: loss")
            except (ValueError, ArithmeticError):  # values or labels matplotlib cannot place
                continue
            names[entry] = f"{entry}_loss.png"
    return names


def render(c: SideBySide, out: Path, plots: dict[str, str], part: str | None = None) -> str:
    """The HTML of compare.html, in the folder `out` (demos.lab.pages.compare lays it out;
    `part`: one block of it, for an inline view)."""
    return page.render(page.Page(
        agree=c.agree, verdict=verdict(c), machines=machines(c), plots=plots,
        unfinished=unfinished(c), notes=[*corrupt_lines(c), *c.notes],
        runs=[page.Column(r.label, r.dir, run_info(r), r.config) for r in c.runs],
        tables=[entry_table(c, i) for i in entry_ids(c.runs)]), out, part)


def entry_table(c: SideBySide, entry: str) -> page.EntryTable:
    """One entry's values, a column per run; cells beyond tolerance of the first run marked."""
    runs = [r for r in c.runs if entry in r.entries]
    beyond = {(r.label, d.key): d.describe() for r, ds in zip(c.runs[1:], c.drifts)
              for d in ds if d.entry == entry and not d.within}
    flat = {r.label: {f"{kind}.{name}": v if number(v) else f"not a number ({short(v)})"
                      for kind in KINDS for name, v in mapping(r.entries[entry].get(kind)).items()}
            for r in runs}
    rows = {key: [page.Cell(flat[r.label].get(key), beyond.get((r.label, key))) for r in runs]
            for key in dict.fromkeys(k for vs in flat.values() for k in vs)}
    return page.EntryTable(entry, [r.label for r in runs],
                           [str(r.entries[entry].get("status", "?")) for r in runs], rows,
                           c.only.get(entry))
