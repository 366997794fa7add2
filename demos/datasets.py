"""Data sets the scenarios train on, loaded offline and verified.

digits: 1,797 handwritten digits, 8x8 pixels valued 0..16 (UCI "Optical Recognition of
Handwritten Digits", E. Alpaydin and C. Kaynak, 1998, CC BY 4.0; the copy scikit-learn ships).
"""
from __future__ import annotations

import gzip
import hashlib
from importlib import resources

import numpy as np

DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"


class DataError(Exception):
    """A data file is missing, altered or malformed."""


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The shipped digits: images (1797, 8, 8) float32 in 0..16 and labels (1797,) int64."""
    blob = resources.files("demos").joinpath("data/digits.csv.gz").read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != DIGITS_SHA256:
        raise DataError(f"demos/data/digits.csv.gz: checksum {digest[:12]}... does not match "
                        f"the shipped data ({DIGITS_SHA256[:12]}...); reinstall the package")
    table = np.loadtxt(gzip.decompress(blob).decode().splitlines(), delimiter=",",
                       dtype=np.int64)  # (1797, 65): 64 pixels, then the label
    return table[:, :64].reshape(-1, 8, 8).astype(np.float32), table[:, 64]
