"""Data sets the scenarios train on, loaded offline and verified: the shipped digits
(demos/docs/documents.md#data), MNIST's IDX files from a folder the user names (nothing is
downloaded), and LeNet's inputs made of either. Imports numpy and torch only when a function
needs them.
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
        found = [f for f in (name, name + ".gz") if os.path.isfile(os.path.join(root, f))]
        if not found:
            raise DataError(f"{os.path.join(root, name)}: missing (also looked for {name}.gz)")
        paths[key] = os.path.join(root, found[0])
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


# -- LeNet's inputs ---------------------------------------------------------------------------
def lenet_images(dataset: str, g, *, root: str | None = None, synthetic_size: int = 512,
                 test_fraction: float = 0.2, max_images: int | None = None):
    """Images (n, 1, 32, 32), labels (n,), and the train / test indices into them: the digits
    upscaled, MNIST padded (as LeNet-5 was; its own test set), or synthetic random images.
    The split (and the synthetic images) come from the generator `g`."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    if dataset == "mnist":
        train_x, train_y, test_x, test_y = load_mnist(root)
        images = torch.from_numpy(np.concatenate([train_x, test_x])).unsqueeze(1)  # (n, 1, 28, 28)
        x = F.pad(images, (2, 2, 2, 2))                                   # (n, 1, 32, 32)
        labels = torch.from_numpy(np.concatenate([train_y, test_y]))
        train = torch.randperm(len(train_x), generator=g)
        test = len(train_x) + torch.arange(len(test_x))
    else:
        if dataset == "digits":
            images, digits = load_digits()
            x = torch.from_numpy(images).unsqueeze(1) / 16.0              # (n, 1, 8, 8)
            x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
            labels = torch.from_numpy(digits)
        else:  # synthetic: the tutorial's random tensors, random labels (nothing to learn)
            x = torch.randn(synthetic_size, 1, 32, 32, generator=g)
            labels = torch.randint(0, 10, (synthetic_size,), generator=g)
        order = torch.randperm(len(x), generator=g)
        n_test = max(1, int(len(x) * test_fraction))
        test, train = order[:n_test], order[n_test:]
    if max_images is not None:
        train, test = train[:max_images], test[:max_images]
    return x, labels, train, test


def standardize(x, train):
    """Zero mean, unit variance, with the statistics of the training images only."""
    if len(train) < 2:
        raise DataError(f"{len(train)} training image(s): too few to train on")
    mean, std = x[train].mean(), x[train].std()
    if not std > 0:
        raise DataError("every training image has the same pixels: nothing to learn")
    return (x - mean) / std


class Shuffles:
    """Each epoch's order of the training images, drawn from the seeded generator when the
    epoch starts (memory for one order, not one per epoch), and copied to the device once per
    epoch: `shuffles(epoch)`, for the epochs in order (the same one again is the order already
    drawn)."""

    def __init__(self, train, g):
        self.train, self.g, self.drawn, self.order = train, g, 0, None

    def __call__(self, epoch: int):
        import torch

        if epoch == self.drawn:  # the epoch starts: its order
            perm = torch.randperm(len(self.train), generator=self.g)
            if self.train.is_cuda:  # pinned: the copy need not wait for the GPU (no sync)
                perm = perm.pin_memory()
            self.order = self.train[perm.to(self.train.device, non_blocking=True)]
            self.drawn = epoch + 1
        elif epoch != self.drawn - 1:
            raise ValueError(f"epoch {epoch}: the shuffles go in order (at {self.drawn - 1})")
        return self.order
