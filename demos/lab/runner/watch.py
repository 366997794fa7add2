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
from demos.lab.core.files import WATCH_PAGE, WATCH_STATE, NoRunFolder, write_atomic
from demos.lab.core.results import EXIT_INTERRUPTED, EXIT_USAGE
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import StopRequest

POLL_S = 0.05  # how often the files' times are read: a save is seen within this


def watch(config: str, output_dir: Path, once: Callable[[], int], latest: Callable[[], Path | None],
          stop: StopRequest, also: tuple[str, ...] = ()) -> int:
    """Run `once()` now and after every change; `latest()`: the run folder it made, if any.
    `also`: more files to watch (a --baseline file, read anew by each run)."""
    files: set[str] = set()
    runs = 0
    try:
        while True:
            user_code.forget_all()  # the user's code loads anew from disk: no stale class
            # the files' state before the run: a save while it runs is a change after it
            before = {f: stamp(f) for f in files | fixed(config, also)}
            try:
                code = once()
            except NoRunFolder:  # an output folder no edit mends: the watch ends (exit 2)
                raise
            except ConfigError as e:  # an edit with a typo: said, and watched until fixed
                say(f"error: {e}", err=True)
                code = EXIT_USAGE
            if code == EXIT_INTERRUPTED or stop.requested:
                return EXIT_INTERRUPTED
            folder = latest()
            if folder is not None and code != EXIT_USAGE:
                runs += 1
                show(output_dir, config, folder, code, runs)
            files = watched(config, also, files, failed=code == EXIT_USAGE)
            if not files:  # nothing that could change: as without --watch
                say("--watch: no file to watch (the config is not a file)", err=True)
                return code
            say(f"watching {len(files)} file(s): {', '.join(sorted(map(short, files)))} "
                f"(Ctrl-C ends the watch)")
            changed = wait_for_change({f: before[f] if f in before else first_seen(f)
                                       for f in files})
            say(f"\n{short(changed)} changed: running again")
    except KeyboardInterrupt:  # while waiting (a run's own Ctrl-C returned above)
        say("\nwatch ended", err=True)
        return EXIT_INTERRUPTED


def fixed(config: str, also: tuple[str, ...]) -> set[str]:
    """The files watched whatever the run loads: the config, and `also` (a baseline)."""
    return {os.path.abspath(f) for f in (config, *also) if f and not f.startswith("<")}


def watched(config: str, also: tuple[str, ...], before: set[str], failed: bool) -> set[str]:
    """The config (and `also`) and the user's code files this run loaded; after a run that
    failed to load (a file that no longer imports, a config that no longer parses), what was
    watched before too, and every .py file beside the code it loaded (a neighbour that failed
    to import left no module to find), so that fixing any of them runs again."""
    loaded = {os.path.abspath(f) for f in user_code.loaded}
    found = loaded | fixed(config, also)
    if not failed:
        return found
    beside = {str(p) for folder in {os.path.dirname(f) for f in loaded}
              for p in Path(folder).glob("*.py")}
    return found | before | beside


CHANGED = (-1, -1)  # a stamp no file has: a change to run at once


def first_seen(path: str) -> tuple[int, int] | None:
    """The baseline of a file the last run loaded for the first time: its stamp now, unless
    what it holds now is not what the run read (saved while the run went on): then changed."""
    read = user_code.loaded.get(path)
    return CHANGED if read is not None and read != user_code.digest(path) else stamp(path)


def stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


SETTLE_S = 0.1  # a change is run once the files have stayed as they are this long


def wait_for_change(before: dict[str, tuple[int, int] | None]) -> str:
    """Block until one of the files differs from `before` (changed, made or removed), then
    until they all stay unchanged for SETTLE_S (a file written in pieces is run whole);
    return the first one changed."""
    while True:
        time.sleep(POLL_S)
        changed = [f for f, was in before.items() if stamp(f) != was]
        if changed:
            break
    now = {f: stamp(f) for f in before}
    settled = time.monotonic()
    while time.monotonic() - settled < SETTLE_S:
        time.sleep(POLL_S / 2)
        again = {f: stamp(f) for f in before}
        if again != now:
            now, settled = again, time.monotonic()
    return changed[0]


def show(output_dir: Path, config: str, folder: Path, code: int, runs: int) -> None:
    """watch.html (once, or again if it was removed) and watch.js; a file that cannot be
    written is a warning, never the watch's end."""
    try:
        if not (output_dir / WATCH_PAGE).is_file():
            write_page(output_dir, config)
            say(f"open {output_dir / WATCH_PAGE} in a browser: it shows each new run's report "
                f"as it finishes")
        write_state(output_dir, folder, code, runs)
    except OSError as e:
        say(f"warning: {WATCH_PAGE} not updated ({e})", err=True)


def short(path: str) -> str:
    return os.path.relpath(path) if Path(path).is_relative_to(Path.cwd()) else path


def write_page(output_dir: Path, config: str) -> None:
    from demos.lab.pages.templating import render
    write_atomic(output_dir / WATCH_PAGE, render("watch.html.j2", config=config))


def write_state(output_dir: Path, folder: Path, code: int, runs: int) -> None:
    """watch.js: what the page shows; a script the page loads again every half second."""
    status = {0: "passed", 1: "failed"}.get(code, "error")
    state = json.dumps({"run": folder.name, "status": status, "runs": runs})
    write_atomic(output_dir / WATCH_STATE, f"autogradDemosWatch({state});\n")
