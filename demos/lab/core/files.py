"""Writing files safely: every file appears whole (temp file + rename) or not at all."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable


def _file_mode() -> int:
    """What open() would give a new file: 0o666 less the umask (mkstemp makes them 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


# save_atomic's temp names: mkstemp puts 8 random characters from [a-z0-9_] between prefix and
# suffix; the second form, .XXXXXXXX.<name>, is what plots were saved under before
TEMP_NAME = re.compile(r"\.(.+\.[a-z0-9_]{8}\.tmp|[a-z0-9_]{8}\..+)")


def remove_temps(folder: Path) -> list[Path]:
    """Remove the temp files that `save_atomic` left in `folder` (and below) when their
    process was killed outright. Only for a folder whose writer is known gone."""
    removed = []
    for top, _, names in os.walk(folder):  # never into a linked folder
        for name in names:
            path = Path(top) / name
            if TEMP_NAME.fullmatch(name) and path.is_file() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` with `save_atomic`; text as UTF-8, where "replace" shows a path
    whose bytes are not UTF-8 as "?" rather than failing."""
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data

    def write(tmp: Path) -> None:  # the temp file itself, never a link swapped in for it
        with open(os.open(tmp, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0)), "wb") as f:
            f.write(raw)
    save_atomic(path, write)


def save_atomic(path: Path, save: Callable[[Path], object]) -> None:
    """Let `save(tmp)` write the file, then rename it over `path`. The temp file, in the same
    folder, is created exclusively under an unpredictable name ending in .tmp (so `save` names
    its format: savefig(tmp, format="png")), and removed again if anything fails."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        save(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def strict(value: Any, not_finite: Callable[[float], Any] = str) -> Any:
    """`value` with every non-finite float as the string "nan", "inf" or "-inf" (or as what
    `not_finite` makes of it: summary.json's null, see results.finite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return not_finite(value)
    if isinstance(value, dict):
        return {k: strict(v, not_finite) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v, not_finite) for v in value]
    return value


def dumps(data: Any, compact: bool = False) -> str:
    """The one JSON writer: strict JSON, which every reader takes (a non-finite float is
    written as a string, see `strict`); indented, or `compact`; with a closing newline."""
    return json.dumps(strict(data), allow_nan=False, indent=None if compact else 2,
                      separators=(",", ":") if compact else None) + "\n"


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, dumps(data))


def overwrite(path: Path, text: str) -> None:
    """Rewrite an existing file in place: the last resort on a full disk, where a temp file
    has no room but the file's own space can take the new text. The text is padded with
    blanks to the file's size and written in one call, never truncating first, so there is
    no moment when the file is empty. For JSON, trailing blanks are still valid."""
    data = text.encode("utf-8", "replace")
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        if len(data) > size:
            raise OSError(f"{path}: {len(data)} bytes do not fit in the {size} it holds")
        f.write(data.ljust(size))  # in the file's own blocks: needs no new space
        f.flush()
        os.fsync(f.fileno())


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows of {column: value} as CSV, floats in full; columns in order of first appearance."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


class NotReadable(Exception):
    """A file that is not a regular file, is too big, or cannot be read; the message says which
    in a few words, for the caller to name the file and the option it came from."""


def read_bytes(path: Path | str, limit: int, links: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; never blocks (a FIFO, a device, a
    link to /dev/zero is refused before any read) and never reads more than `limit` + 1 bytes.
    Links to regular files are followed, unless `links` is False (then a link is not readable)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    if not links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise NotReadable("no such file") from None
    except OSError as e:
        raise NotReadable(f"cannot read: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise NotReadable("is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise NotReadable("not a regular file (a FIFO, a device or a socket)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)  # buffered: reads until it has limit + 1 bytes or the end
    except OSError as e:
        raise NotReadable(f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotReadable(f"larger than {limit >> 10} KiB")
    return data
