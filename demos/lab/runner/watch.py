"""--watch: run the config, then again each time it, or a file of the user's code that the run
loaded, changes; in this process, where torch (and torch.compile, once used) is already
imported, so a rerun costs what the run itself does. Each rerun is an ordinary run folder; the
output folder's watch.html shows the newest run's report. Ctrl-C ends the watch (exit 130): in
a run, that run stops whole first, as without --watch.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from demos.lab.core import user_code
from demos.lab.core.console import say
from demos.lab.core.files import write_atomic
from demos.lab.core.layout import WATCH_PAGE, WATCH_STATE
from demos.lab.core.results import EXIT_INTERRUPTED, EXIT_USAGE
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import StopRequest

POLL_S = 0.05  # how often the files' times are read: a save is seen within this


def watch(config: str, output_dir: Path, once: Callable[[], int], latest: Callable[[], Path | None],
          stop: StopRequest) -> int:
    """Run `once()` now and after every change; `latest()`: the run folder it made, if any."""
    files: set[str] = set()
    runs = 0
    page_written = False
    try:
        while True:
            user_code.forget_all()  # the user's code loads anew from disk: no stale class
            user_code.loaded.clear()
            try:
                code = once()
            except ConfigError as e:  # an edit with a typo: said, and watched until fixed
                say(f"error: {e}", err=True)
                code = EXIT_USAGE
            if code == EXIT_INTERRUPTED or stop.requested:
                return EXIT_INTERRUPTED
            folder = latest()
            if folder is not None and code != EXIT_USAGE:
                runs += 1
                if not page_written:
                    write_page(output_dir, config)
                    page_written = True
                    say(f"open {output_dir / WATCH_PAGE} in a browser: it shows each new run's "
                        f"report as it finishes")
                write_state(output_dir, folder, code, runs)
            files = watched(config, files)
            say(f"watching {len(files)} file(s): {', '.join(sorted(map(short, files)))} "
                f"(Ctrl-C ends the watch)")
            changed = wait_for_change(files)
            say(f"\n{short(changed)} changed: running again")
    except KeyboardInterrupt:  # while waiting (a run's own Ctrl-C returned above)
        say("\nwatch ended", err=True)
        return EXIT_INTERRUPTED


def watched(config: str, before: set[str]) -> set[str]:
    """The config and the user's code files this run loaded; what was watched before, too,
    when this run failed before loading them (a config that no longer parses)."""
    found = {os.path.abspath(f) for f in user_code.loaded}
    if os.path.isfile(config):
        found.add(os.path.abspath(config))
    return found if len(found) > 1 or not before else found | before


def stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def wait_for_change(files: set[str]) -> str:
    """Block until one of `files` is changed, made or removed; return it."""
    before = {f: stamp(f) for f in files}
    while True:
        time.sleep(POLL_S)
        for f, was in before.items():
            if stamp(f) != was:
                return f


def short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def write_page(output_dir: Path, config: str) -> None:
    from demos.lab.pages.templating import render
    write_atomic(output_dir / WATCH_PAGE, render("watch.html.j2", config=config))


def write_state(output_dir: Path, folder: Path, code: int, runs: int) -> None:
    """watch.js: what the page shows; a script the page loads again every half second."""
    status = {0: "passed", 1: "failed"}.get(code, "error")
    state = json.dumps({"run": folder.name, "status": status, "runs": runs})
    write_atomic(output_dir / WATCH_STATE, f"autogradDemosWatch({state});\n")
