"""Data sets the scenarios train on, loaded offline and verified.

digits: 1,797 handwritten digits, 8x8 pixels valued 0..16 (UCI "Optical Recognition of
Handwritten Digits", E. Alpaydin and C. Kaynak, 1998, CC BY 4.0; the copy scikit-learn ships).
mnist: the standard MNIST IDX files from a folder the user names (nothing is downloaded).
"""
from __future__ import annotations

import gzip
import hashlib
import math
import os
import struct
import zlib
from importlib import resources

DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
MNIST_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
               "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
IDX_TYPES = {0x08: "B"}  # the only element type MNIST uses: unsigned byte


class DataError(Exception):
    """A data file is missing, altered or malformed; the message names it."""


def load_digits():
    """The shipped digits: images (1797, 8, 8) float32 in 0..16 and labels (1797,) int64."""
    import numpy as np

    blob = resources.files("demos").joinpath("data/digits.csv.gz").read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != DIGITS_SHA256:
        raise DataError(f"demos/data/digits.csv.gz: checksum {digest[:12]}... does not match "
                        f"the shipped data ({DIGITS_SHA256[:12]}...); reinstall the package")
    table = np.loadtxt(gzip.decompress(blob).decode().splitlines(), delimiter=",",
                       dtype=np.int64)  # (1797, 65): 64 pixels, then the label
    return table[:, :64].reshape(-1, 8, 8).astype(np.float32), table[:, 64]


def find_mnist_files(root: str) -> dict[str, str]:
    """The paths of the four MNIST files in `root` (each plain or .gz); DataError if missing."""
    if not os.path.isdir(root):
        raise DataError(f"{root}: no such folder (expected the MNIST IDX files in it)")
    paths = {}
    for key, name in MNIST_FILES.items():
        for candidate in (name, name + ".gz"):
            if os.path.isfile(os.path.join(root, candidate)):
                paths[key] = os.path.join(root, candidate)
                break
        else:
            raise DataError(f"{os.path.join(root, name)}: missing (also looked for {name}.gz)")
    return paths


MAX_IDX_BYTES = 2**28  # 268 MB of pixels (MNIST's largest file has 47 MB): 1 GB as float32


def read_idx(path: str, dims: int):
    """One IDX file as a uint8 array with `dims` dimensions; DataError naming it if malformed.

    The header is read first and the size it declares checked against MAX_IDX_BYTES before
    anything else is read, so a small .gz that unpacks to gigabytes is refused cheaply.
    """
    import numpy as np

    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4 + 4 * dims)
            if len(head) < 4 + 4 * dims:
                raise DataError(f"{path}: too short for an IDX header ({len(head)} bytes)")
            zero, kind, ndim = struct.unpack(">HBB", head[:4])
            if zero != 0 or kind not in IDX_TYPES or ndim != dims:
                raise DataError(f"{path}: not an IDX file of unsigned bytes with {dims} "
                                f"dimension(s) (magic {head[:4].hex()})")
            shape = struct.unpack(f">{dims}I", head[4:])
            expected = math.prod(shape)
            if expected > MAX_IDX_BYTES:
                raise DataError(f"{path}: header says {shape} = {expected:,} bytes of data, "
                                f"more than the {MAX_IDX_BYTES:,} this reader takes")
            body = f.read(expected + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read: {e}") from None
    if len(body) != expected:
        raise DataError(f"{path}: header says {shape} = {expected} bytes of data, "
                        f"found {'more' if len(body) > expected else len(body)}")
    return np.frombuffer(body, dtype=np.uint8).reshape(shape)


def load_mnist(root: str):
    """MNIST from `root`: (train_images, train_labels, test_images, test_labels), images float32
    in 0..1 of shape (n, 28, 28) and labels int64 in 0..9."""
    import numpy as np

    paths = find_mnist_files(root)
    out = []
    for split in ("train", "test"):
        images = read_idx(paths[f"{split}_images"], 3)
        labels = read_idx(paths[f"{split}_labels"], 1)
        if images.shape[1:] != (28, 28):
            raise DataError(f"{paths[f'{split}_images']}: images of {images.shape[1]}x"
                            f"{images.shape[2]} pixels; MNIST's are 28x28")
        if len(images) != len(labels):
            raise DataError(f"{paths[f'{split}_labels']}: {len(labels)} labels for "
                            f"{len(images)} images in {paths[f'{split}_images']}")
        least = 2 if split == "train" else 1  # to standardize on; to measure accuracy on
        if len(images) < least:
            raise DataError(f"{paths[f'{split}_images']}: {len(images)} image(s); a {split} "
                            f"split needs at least {least}")
        if labels.size and labels.max() > 9:
            raise DataError(f"{paths[f'{split}_labels']}: label {labels.max()} is not a digit")
        out += [images.astype(np.float32) / 255.0, labels.astype(np.int64)]
    return tuple(out)
