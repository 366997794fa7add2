"""Text as the console and the error messages can show it."""
from __future__ import annotations

import contextlib
import logging
import os
import site
import sys
import sysconfig
import traceback


def visible(text: str) -> str:
    """A command-line value as an error message can show it on one line: itself, or its repr
    when it holds control or other unprintable characters."""
    return text if text.isprintable() else repr(text)


def no_surrogates(text: str) -> str:
    """`text` with the lone surrogates that stand for undecodable bytes (os.fsdecode) as "?"."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        data = text.encode("utf-8", "replace")
    return data.decode("utf-8", "replace").replace("\ufffd", "?")


def message(e: BaseException) -> str:
    """str(e); where the exception's own __str__ raises (user code's), what can be said of it,
    so that reporting it never raises in turn and loses what was found before."""
    try:
        return str(e)
    except Exception as inner:
        return f"(its message could not be read: {type(inner).__name__} in its __str__)"


def one_line(e: BaseException, limit: int = 400, located: bool = True) -> str:
    """An exception as one short line, for a check's detail or an error message: its type and
    its message, the lines joined and the spaces collapsed, cut at `limit` characters; raised
    in the user's code (and `located`), where (`where`), its traceback kept in run.log (not the
    console)."""
    text = " ".join(message(e).split())
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    at = where(e) if located else ""
    if at and not getattr(e, "_kept", False):  # once per exception
        with contextlib.suppress(Exception):
            e._kept = True  # type: ignore[attr-defined]
        logging.getLogger("demos.errors").info("raised in the user's code:\n%s", "".join(
            traceback.format_exception(type(e), e, e.__traceback__)), extra={"console": False})
    at, limit = (f" (at {at})", max(limit - len(at) - 6, 20)) if at else ("", limit)
    return (text if len(text) <= limit else text[:limit - 3] + "...") + at


def where(e: BaseException) -> str:
    """The innermost frame of e's traceback in the user's code, not the lab's (demos/lab,
    demos/*.py), Python's, an installed package's (torch's) or what torch's compiler generated
    (inductor's cache): 'fns.py:12 in backward', its path relative where under the current
    folder; '' where none is."""
    lab = os.path.dirname(os.path.dirname(__file__))
    paths = sysconfig.get_paths()
    roots = tuple(os.path.join(os.path.abspath(r), "") for r in (
        lab, *site.getsitepackages(), site.getusersitepackages(), *generated(),
        *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))))
    for f in reversed(traceback.extract_tb(e.__traceback__)):
        path = os.path.abspath(f.filename)
        if not (f.filename.startswith("<") or path.startswith(roots)
                or os.path.dirname(path) == os.path.dirname(lab)):
            here = path.startswith(os.path.join(os.getcwd(), ""))
            return f"{os.path.relpath(path) if here else path}:{f.lineno} in {f.name}"
    return ""


def generated() -> list[str]:
    """Where torch's compiler, once loaded, writes the code it generates (inductor's cache
    folder: $TORCHINDUCTOR_CACHE_DIR, else torch's default, read without making it)."""
    utils = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    if utils is None:
        return []
    return [os.environ.get("TORCHINDUCTOR_CACHE_DIR") or utils.default_cache_dir()]
