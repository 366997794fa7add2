"""Data sets: the shipped digits, and MNIST IDX files (built here, tiny) with every malformation."""
import gzip
import struct

import numpy as np
import pytest

from demos.cli import main
from demos.documents.datasets import DataError, load_digits, load_mnist, read_idx
from tests.conftest import CONFIGS, entry, only_run_dir, summary


def idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def make_mnist(folder, n_train=40, n_test=20, gz=False, seed=0):
    """A tiny MNIST in the standard IDX layout: each digit is a bright square at its own place."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 40, (n, 28, 28))
        for i, label in enumerate(labels):
            r, c = divmod(int(label), 4)
            images[i, 4 + 6 * r:8 + 6 * r, 4 + 6 * c:8 + 6 * c] = 255
        for kind, array in (("images-idx3-ubyte", images), ("labels-idx1-ubyte", labels)):
            data = idx_bytes(array)
            name = folder / f"{prefix}-{kind}{'.gz' if gz else ''}"
            name.write_bytes(gzip.compress(data) if gz else data)
    return folder


def test_digits_are_the_documented_data():
    images, labels = load_digits()
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,)
    assert images.min() == 0 and images.max() == 16
    assert sorted(set(labels.tolist())) == list(range(10))
    assert 174 <= np.bincount(labels).min() and np.bincount(labels).max() <= 183


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_plain_and_gz(tmp_path, gz):
    train_x, train_y, test_x, test_y = load_mnist(str(make_mnist(tmp_path, gz=gz)))
    assert train_x.shape == (40, 28, 28) and test_x.shape == (20, 28, 28)
    assert train_y.shape == (40,) and test_y.dtype == np.int64
    assert 0.0 <= train_x.min() and train_x.max() == 1.0


def test_a_missing_file_is_named(tmp_path):
    folder = make_mnist(tmp_path)
    (folder / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte: missing \(also looked for "
                                        r"t10k-labels-idx1-ubyte.gz\)"):
        load_mnist(str(folder))
    with pytest.raises(DataError, match="no such folder"):
        load_mnist(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("corrupt, message", [
    (lambda b: b[:6], "too short for an IDX header"),
    (lambda b: b"\x00\x00\x0d\x03" + b[4:], "not an IDX file of unsigned bytes with 3 dimension"),
    (lambda b: b[:-5], "header says (40, 28, 28) = 31360 bytes of data, found 31355"),
])
def test_a_malformed_file_is_named(tmp_path, corrupt, message):
    folder = make_mnist(tmp_path)
    path = folder / "train-images-idx3-ubyte"
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(DataError) as e:
        read_idx(str(path), 3)
    assert str(e.value).startswith(str(path)) and message in str(e.value)


def test_label_problems_are_named(tmp_path):
    folder = make_mnist(tmp_path)
    (folder / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.full(39, 3)))
    with pytest.raises(DataError, match="39 labels for 40 images"):
        load_mnist(str(folder))
    (folder / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.full(40, 12)))
    with pytest.raises(DataError, match="label 12 is not a digit"):
        load_mnist(str(folder))
    (folder / "train-labels-idx1-ubyte.gz").unlink(missing_ok=True)
    (folder / "train-labels-idx1-ubyte").write_bytes(b"\x1f\x8b broken")
    (folder / "train-labels-idx1-ubyte").rename(folder / "train-labels-idx1-ubyte.gz")
    with pytest.raises(DataError, match="cannot read"):
        load_mnist(str(folder))


def test_lenet_trains_on_mnist_idx_files(tmp_path, capsys):
    folder = make_mnist(tmp_path / "mnist", n_train=200, n_test=50, gz=True)
    code = main(["--config", "configs/lenet.yaml", "--dry-run", "--no-progress",
                 "--output-dir", str(tmp_path / "out"), "--set", "scenarios.lenet.dataset=mnist",
                 "--set", f"scenarios.lenet.root={folder}", "--set", "scenarios.lenet.expect={}"])
    assert code == 0, capsys.readouterr()
    e = entry(summary(only_run_dir(tmp_path / "out")), "lenet")
    assert e["status"] == "passed" and e["steps"] == 4  # 200 images / 64 per batch, one epoch
    assert 0.0 <= e["metrics"]["test_accuracy"] <= 1.0


def test_lenet_synthetic_runs_quickly(tmp_path):
    code = main(["--config", "configs/lenet.yaml", "--no-progress", "--output-dir", str(tmp_path),
                 "--set", "scenarios.lenet.dataset=synthetic", "--set", "scenarios.lenet.epochs=2",
                 "--set", "scenarios.lenet.expect={}"])
    assert code == 0
    e = entry(summary(only_run_dir(tmp_path)), "lenet")
    assert e["status"] == "passed" and 0.0 <= e["metrics"]["test_accuracy"] <= 1.0


def test_mnist_config_errors(tmp_path, capsys):
    base = ["--config", "configs/lenet.yaml", "--set", "scenarios.lenet.dataset=mnist"]
    assert main(base) == 2
    assert capsys.readouterr().err.strip() == (
        "error: configs/lenet.yaml: scenarios[0].root: dataset mnist needs root: the folder with "
        "train-images-idx3-ubyte and the other MNIST IDX files")
    assert main(base + ["--set", f"scenarios.lenet.root={tmp_path}"]) == 2
    assert capsys.readouterr().err.strip().startswith(
        f"error: configs/lenet.yaml: scenarios[0].root: {tmp_path}/train-images-idx3-ubyte: "
        f"missing")
    assert main(["--config", "configs/lenet.yaml", "--set", "scenarios.lenet.root=x"]) == 2
    assert "root: only used with dataset: mnist" in capsys.readouterr().err


def test_a_small_gzip_that_declares_huge_images_is_refused_before_it_is_unpacked(tmp_path):
    import gzip
    import resource
    import time
    header = struct.pack(">HBB", 0, 0x08, 3) + struct.pack(">3I", 60000, 1000, 1000)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    with gzip.open(path, "wb") as f:  # 60 GB declared; 300 MB of zeros actually there
        f.write(header)
        for _ in range(300):
            f.write(bytes(1 << 20))
    assert path.stat().st_size < 1_000_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(DataError, match=r"header says \(60000, 1000, 1000\) = 60,000,000,000 "
                                        r"bytes of data, more than the 268,435,456"):
        read_idx(str(path), 3)
    assert time.monotonic() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB


def test_mnist_images_of_another_size_are_named(tmp_path):
    folder = make_mnist(tmp_path / "m")
    (folder / "train-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((40, 20, 20))))
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: images of 20x20 pixels; "
                                        r"MNIST's are 28x28"):
        load_mnist(str(folder))


def test_images_that_are_all_alike_are_named_not_diverged(tmp_path, capsys):
    folder = make_mnist(tmp_path / "m")
    for name in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte"):
        n = 40 if name.startswith("train") else 20
        (folder / name).write_bytes(idx_bytes(np.zeros((n, 28, 28))))  # blank scans
    assert main(["--config", str(CONFIGS / "lenet.yaml"), "--no-progress", "--output-dir",
                 str(tmp_path / "out"), "--set", "scenarios.lenet.dataset=mnist",
                 "--set", f"scenarios.lenet.root={folder}", "--set", "scenarios.lenet.epochs=1",
                 "--set", "scenarios.lenet.expect={}"]) == 1
    assert "ERROR DataError: every training image has the same pixels" in capsys.readouterr().out


@pytest.mark.parametrize("n_train, n_test, message", [
    (1, 20, r"train-images-idx3-ubyte: 1 image\(s\); a train split needs at least 2"),
    (40, 0, r"t10k-images-idx3-ubyte: 0 image\(s\); a test split needs at least 1")])
def test_too_few_images_are_named(tmp_path, n_train, n_test, message):
    """Not "diverged" (an empty test split gave a NaN accuracy), and with the file's name."""
    folder = make_mnist(tmp_path / "m", n_train=n_train, n_test=n_test)
    with pytest.raises(DataError, match=message):
        load_mnist(str(folder))
