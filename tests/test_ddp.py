"""lenet_ddp under torchrun: two real processes on the CPU over loopback (gloo), the checks that
make data-parallel training trustworthy, each shown failing, and no rank left hanging."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from demos.lab.core.schema import ConfigError
from demos.lab.runner import torchrun as distributed
from tests.conftest import CONFIGS, ROOT, check, entry, only_run_dir

DDP = ROOT / "tests" / "fixtures" / "ddp.yaml"
CHECKS = ("weights identical on every rank", "DDP equals one process over the first steps")


def torchrun(*args, **kwargs):
    """`torchrun --standalone --nproc-per-node 2 runner.py ARGS` (the venv's torchrun)."""
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    return subprocess.Popen([exe, "--standalone", "--nproc-per-node", "2",
                             str(ROOT / "runner.py"), "--no-progress", *map(str, args)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    proc = torchrun("--config", DDP, "--output-dir", out)
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout + stderr, only_run_dir(out)


def statuses(e):
    return {name: check(e, name)["passed"] for name in CHECKS if any(
        c["name"] == name for c in e["checks"])}


@pytest.mark.slow
def test_two_processes_train_lenet_as_one(ddp_run):
    code, text, run_dir = ddp_run
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["world"] == {"size": 2, "backend": "gloo"}
    assert s["command"][:2] == ["torchrun", "--nproc-per-node=2"]  # what starts it again
    index = (run_dir.parent / "index.html").read_text()
    assert "torchrun: 2 processes" in index
    e = entry(s, "lenet_ddp")
    assert e["status"] == "passed", text
    assert statuses(e) == dict.fromkeys(CHECKS, True)
    assert "identical on all 2 ranks" in check(e, CHECKS[0])["detail"]
    assert check(e, "expect metrics.test_accuracy")["passed"]
    assert e["inspection"]["gradient buckets"] == 1
    assert "32 images per rank" in e["inspection"]["DDP"]
    # rank 0 alone writes the run; rank 1 logs into it
    assert sorted(p.name for p in run_dir.iterdir() if p.is_file()) == [
        "config.yaml", "rank1.log", "report.html", "run.log", "summary.json"]
    rank1 = (run_dir / "rank1.log").read_text()
    assert "rank 1 of 2 (gloo)" in rank1 and "lenet_ddp done: 460 steps" in rank1
    assert "start my_exp" not in rank1 and entry(s, "my_exp")["status"] == "passed"
    assert code == 1 and "FAILED" in text  # the mistakes below fail, as they must


@pytest.mark.slow
@pytest.mark.parametrize("mistake, caught", [
    ("no_allreduce", {CHECKS[0]: False, CHECKS[1]: False}),  # gradients stay local
    ("local_batch", {CHECKS[0]: True, CHECKS[1]: False}),    # the global batch doubles
    ("rank_lr", {CHECKS[0]: False, CHECKS[1]: False}),       # rank 1 steps further, and its
])                                                           # gradients then pull rank 0 off
def test_each_mistake_is_caught_by_its_check(ddp_run, mistake, caught):
    e = entry(json.loads((ddp_run[2] / "summary.json").read_text()), mistake)
    assert e["status"] == "failed" and statuses(e) == caught


@pytest.mark.slow
def test_rank_0_failing_alone_leaves_no_rank_waiting(ddp_run):
    """rank 0 raises mid-training: it gives the process group up (rank 1's all-reduce fails at
    once, and rank 1 ends quietly), the data-parallel entries after it do not run, and the
    entries for rank 0 only still do."""
    code, text, run_dir = ddp_run
    s = json.loads((run_dir / "summary.json").read_text())
    assert entry(s, "rank0_raises")["status"] == "error"
    assert "rank 0 fails alone at step 3" in entry(s, "rank0_raises")["error"]
    assert entry(s, "after")["error"] == ("not run: the process group was given up after "
                                          "rank0_raises failed")
    assert entry(s, "my_exp")["status"] == "passed"
    assert "rank0_raises: rank 0 gave the process group up" in (run_dir / "rank1.log").read_text()
    assert "failed (exitcode: 1) local_rank: 0" in text  # torchrun: rank 0 failed, rank 1 not


@pytest.mark.slow
def test_accuracy_and_buckets(ddp_run):
    e = entry(json.loads((ddp_run[2] / "summary.json").read_text()), "too_short")
    assert statuses(e) == dict.fromkeys(CHECKS, True)
    assert check(e, "expect metrics.test_accuracy")["passed"] is False
    assert e["inspection"]["gradient buckets"] > 1  # bucket_cap_mb 0.1: several


def ranks_of(torchrun_pid: int) -> list[int]:
    """The worker processes torchrun started (each in a session of its own)."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True,
                           text=True).stdout.split()
    return [int(p) for p, parent in zip(table[::2], table[1::2]) if parent == str(torchrun_pid)]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT to torchrun", "rank 1 killed"])
def test_no_rank_is_left_hanging(tmp_path, how):
    proc = torchrun("--config", CONFIGS / "lenet_ddp.yaml", "--set",
                    "scenarios.lenet_ddp.epochs=1000", "--output-dir", tmp_path)
    deadline = time.time() + 60
    while time.time() < deadline and \
            "lenet_ddp done" not in str(list(tmp_path.glob("*/run.log"))):
        logs = [*tmp_path.glob("*/rank1.log"), *tmp_path.glob("*/run.log")]
        if len(logs) == 2 and all("training: steps" in p.read_text() for p in logs):
            break  # both ranks in their loops: a state seen in their logs
        time.sleep(0.2)
    if how == "SIGINT to torchrun":
        proc.send_signal(signal.SIGINT)
    else:
        workers = ranks_of(proc.pid)
        assert len(workers) == 2
        os.kill(max(workers), signal.SIGKILL)  # the later-started worker
    start = time.time()
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        for pid in ranks_of(proc.pid) + [proc.pid] * (proc.poll() is None):
            os.kill(pid, signal.SIGKILL)
    assert time.time() - start < 45 and proc.returncode != 0, out + err
    s = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert s["status"] in ("interrupted", "failed"), s["status"]
    assert entry(s, "lenet_ddp")["status"] in ("interrupted", "error")


def test_torchrun_environment():
    assert distributed.from_env({}) == distributed.SINGLE
    assert distributed.from_env({"WORLD_SIZE": "1", "RANK": "0"}) == distributed.SINGLE
    w = distributed.from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1",
                              "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert (w.rank, w.size, w.local_rank, w.local_size, w.primary) == (3, 4, 1, 2, False)
    for bad in ({"WORLD_SIZE": "2", "RANK": "x"}, {"WORLD_SIZE": "2", "RANK": "2"}):
        with pytest.raises(ConfigError):
            distributed.from_env(bad)


def test_a_global_batch_the_ranks_cannot_share_is_a_config_error(tmp_path, monkeypatch, capsys):
    """Every rank checks it before joining the process group: as rank 0 of 2 here."""
    from demos.cli import main

    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0"),
                        ("LOCAL_WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29500")):
        monkeypatch.setenv(name, value)
    code = main(["--config", str(CONFIGS / "lenet_ddp.yaml"), "--set",
                 "scenarios.lenet_ddp.batch_size=63", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"error: {CONFIGS / 'lenet_ddp.yaml'}: scenarios[0].batch_size: "
                                 f"63 is the global batch; it must divide among the 2 "
                                 f"processes\n")
    assert not any(tmp_path.iterdir())
