"""What a run leaves in its folder besides the entries' own files: summary.json (written as the
run goes and at its end), report.html with the runs' index, and a saved baseline. Each writer
reports its failure and never costs the run what it already has."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import traceback
from pathlib import Path
from typing import Callable

import yaml

from demos.lab.comparing.baseline import save
from demos.lab.core.config import RunConfig, entry_dict
from demos.lab.core.files import SUMMARY, dumps, identity, overwrite, write_atomic
from demos.lab.core.results import RunSummary
from demos.lab.core.scenario import Registry
from demos.lab.pages import index, report


def write_summary(run_dir: Path, summary: RunSummary, log: logging.Logger, final: bool = True,
                  entries_left: int = 0) -> OSError | None:
    """summary.json, whole at every moment, in the fullest form that can be written (the
    forms: demos/docs/guarantees.md, "Nothing already produced is lost"). Returns why none
    could be written (None when one was); the final one says so."""
    path, data = run_dir / SUMMARY, summary.to_json()
    if not final:  # so that the index can tell a run killed outright from a running one
        process = identity()
        data.update(pid=os.getpid(), host=socket.gethostname(),
                    **({"process": dataclasses.asdict(process)} if process else {}))
    text = dumps(data)
    # room for what the final summary adds: each entry's results, the closing fields
    room = len(text) + 8192 + 4096 * entries_left
    padded, compact = lambda: text if final else text.ljust(room), lambda: dumps(data, compact=True)
    whole = [(write_atomic, padded), (overwrite, lambda: text), (overwrite, compact),
             *([] if final else [(write_atomic, lambda: text)]), (write_atomic, compact)]
    why = None
    for write, form in whole:  # each form made only when the one before could not be written
        try:
            write(path, form())  # overwrite refuses (OSError) what does not fit, or no file
            return None
        except OSError as e:
            why = why or e  # the first: the others follow from it
    if final:  # the console lines above still tell every result
        log.error("could not write summary.json: %s", why)
    return why


def write_baseline(path: str, summary: RunSummary, cfg: RunConfig, log: logging.Logger) -> bool:
    """--save-baseline: the run's values (none of an interrupted run's); False when the file
    could not be written."""
    if summary.status == "interrupted":
        log.warning("baseline not saved: the run was interrupted")
        return True
    try:
        log.info("%s", save(path, summary, {e.id: e.scenario for e in cfg.scenarios}))
        return True
    except OSError as e:
        log.error("could not save the baseline %s: %s", path, e)
        return False


def write_pages(run_dir: Path, summary: RunSummary, cfg: RunConfig, registry: Registry,
                log: logging.Logger, warn_once: Callable[[str], None]) -> Path | None:
    """report.html in the run folder, and the runs' index.html beside the run folders."""
    configs = {e.id: yaml.safe_dump(entry_dict(e), sort_keys=False) for e in cfg.scenarios}
    about = {name: s.about for name, s in registry.items()}
    try:
        path = report.write_report(run_dir, summary, about, configs)
    except Exception as e:  # a full disk; or a bug here, which must not cost the run
        log.error("report.html:\n%s", traceback.format_exc(), extra={"console": False})
        warn_once(f"could not write the report: {type(e).__name__}: {e}")
        return None
    write_index(run_dir.parent, warn_once)
    return path


def prepare_pages() -> None:
    """jinja2 and the pages' templates, loaded and compiled ahead of write_pages; a template
    that does not compile is write_pages' error to report."""
    from demos.lab.pages.templating import environment

    with contextlib.suppress(Exception):
        for template in ("report.html.j2", "index.html.j2"):
            environment().get_template(template)


def write_index(output_dir: Path, warn: Callable[[str], None]) -> None:
    """The runs' index.html in `output_dir`; what it cannot do, a warning."""
    try:
        skipped = index.write_index(output_dir)
    except Exception as e:  # a full disk, a lock held too long, a folder it cannot read
        warn(f"index.html not rebuilt ({e}); the next run rebuilds it")
    else:
        if skipped:
            warn(f"index.html leaves out {', '.join(skipped)}: not a run's files")
