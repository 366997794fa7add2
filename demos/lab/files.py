"""Writing files safely: every file appears whole (temp file + rename) or not at all."""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Callable


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` through a temp file in the same folder, then rename over it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(tmp, path)


def save_atomic(path: Path, save: Callable[[Path], None]) -> None:
    """Let `save(tmp_path)` write the file (e.g. savefig), then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".tmp{os.getpid()}.{path.name}")  # keeps the suffix for the writer
    try:
        save(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, allow_nan=True) + "\n")


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows of {column: value} as CSV; columns in order of first appearance, blanks where absent."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    write_atomic(path, buf.getvalue())
