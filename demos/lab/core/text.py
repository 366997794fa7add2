"""Text as the console and the error messages can show it."""
from __future__ import annotations


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


def one_line(e: BaseException, limit: int = 400) -> str:
    """An exception as one short line, for a check's detail or an error message: its type and
    its message, the lines joined and the spaces collapsed, cut at `limit` characters."""
    text = " ".join(message(e).split())
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
