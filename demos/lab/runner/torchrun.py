"""More than one process: the runner under `torchrun`, one process per rank. Rank 0 is the
ordinary run; the other ranks follow it in the data-parallel entries alone
(demos.lab.runner.other_ranks). What it does and guarantees: demos/docs/torchrun.md.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from demos.lab.core.console import say
from demos.lab.core.files import rank_log_name
from demos.lab.core.schema import ConfigError
from demos.lab.core.text import one_line

TIMEOUT_S = 300  # the longest a collective waits for a rank that does not come


@dataclass(frozen=True)
class World:
    """Which process this is among the run's processes; one process: rank 0 of 1."""
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    backend: str | None = None

    @property
    def primary(self) -> bool:
        """The rank that writes the run's files."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.size > 1


SINGLE = World()


def from_env(env: Any = None) -> World:
    """The World that torchrun's variables describe; SINGLE outside torchrun."""
    env = os.environ if env is None else env
    try:
        size = int(env.get("WORLD_SIZE", "1"))
        start = (f"start it with torchrun (torchrun --standalone --nproc-per-node {size} "
                 f"runner.py ...), or unset WORLD_SIZE for one process")
        if size < 1:
            raise ConfigError(f"WORLD_SIZE {size}: the number of processes is at least 1")
        if size > 1 and "RANK" not in env:
            raise ConfigError(f"WORLD_SIZE {size} is set but RANK is not: {start}")
        if size == 1:
            return SINGLE
        world = World(int(env["RANK"]), size, int(env.get("LOCAL_RANK", env["RANK"])),
                      int(env.get("LOCAL_WORLD_SIZE", size)))
    except ValueError:
        raise ConfigError("torchrun's RANK, WORLD_SIZE, LOCAL_RANK or LOCAL_WORLD_SIZE is not "
                          "a number") from None
    if not 0 <= world.rank < size or not 0 <= world.local_rank < world.local_size:
        raise ConfigError(f"torchrun's RANK {world.rank} / LOCAL_RANK {world.local_rank} "
                          f"does not fit WORLD_SIZE {size} / LOCAL_WORLD_SIZE {world.local_size}")
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:  # the process group's rendezvous reads them; torchrun sets them all
        raise ConfigError(f"WORLD_SIZE {size} and RANK {world.rank} are set but "
                          f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: "
                          f"{start}")
    if not env["MASTER_PORT"].isascii() or not env["MASTER_PORT"].isdigit() or \
            not 0 < int(env["MASTER_PORT"]) < 65536:
        raise ConfigError(f"MASTER_PORT {env['MASTER_PORT']!r}: not a port number")
    return world


def join(world: World, device: Any) -> tuple[World, Any]:
    """Join the process group; each CUDA rank takes the GPU of its local rank. Returns the
    world with its backend, and the rank's device."""
    import torch
    import torch.distributed as dist

    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count != 1 and count < world.local_size:
            raise ConfigError(f"torchrun: {world.local_size} processes on this node, "
                              f"{count} GPU(s): one GPU per process")
        # one GPU visible (CUDA_VISIBLE_DEVICES set per process): that one
        device = torch.device("cuda", 0 if count == 1 else world.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise ConfigError(f"torchrun: data-parallel training runs on cpu or cuda, not "
                          f"{device.type}")
    try:  # an address that does not resolve would have the rendezvous retry for TIMEOUT_S
        socket.getaddrinfo(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    except (OSError, UnicodeError) as e:
        raise ConfigError(f"MASTER_ADDR {os.environ['MASTER_ADDR']!r}: not an address this "
                          f"machine can resolve ({getattr(e, 'strerror', None) or e})") from None
    joined = waiting(lambda: dist.init_process_group(
        backend, timeout=dt.timedelta(seconds=TIMEOUT_S),
        device_id=device if device.type == "cuda" else None), world)
    if isinstance(joined, BaseException):
        raise ConfigError(f"torchrun: rank {world.rank} could not join the process group at "
                          f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}: "
                          f"{one_line(joined, 300)}")
    return World(world.rank, world.size, world.local_rank, world.local_size, backend), device


SAY_AFTER_S = 3.0  # a rank that has waited this long for its peers says so


def waiting(join: Any, world: World) -> BaseException | None:
    """Run `join` (the rendezvous, which blocks in C++ until every rank has come) in a thread,
    so that the main thread stays free for signals: Ctrl-C or SIGTERM end the wait as they end
    any start-up (KeyboardInterrupt), where a wait in the main thread would ignore them for up to
    TIMEOUT_S. After SAY_AFTER_S, one line says what it waits for. Returns the join's error."""
    failed: list[BaseException] = []

    def join_keeping_its_error() -> None:
        try:
            join()
        except BaseException as e:  # reported by the caller, in the main thread
            failed.append(e)

    thread = threading.Thread(target=join_keeping_its_error, name="torchrun-join",
                              daemon=True)
    thread.start()
    thread.join(SAY_AFTER_S)
    if thread.is_alive():
        say(f"torchrun: rank {world.rank} waits for the other {world.size - 1} rank(s) at "
            f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} (at most "
            f"{TIMEOUT_S} s; Ctrl-C stops it)", err=True)
    while thread.is_alive():
        thread.join(0.2)  # signals are handled between these waits
    return failed[0] if failed else None


def share(world: World, value: Any) -> Any:
    """Rank 0's `value` (the run folder), on every rank."""
    import torch.distributed as dist

    if not world.active:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def leave(world: World) -> None:
    """Leave the process group (at the end, or to abandon it: a peer blocked in a collective
    with this rank then gets an error at once instead of waiting for TIMEOUT_S)."""
    import torch.distributed as dist

    if world.active and dist.is_initialized():
        dist.destroy_process_group()


# Rank 0 says, through the process group's key-value store, when each data-parallel entry
# starts, or that it gave the process group up (after such an entry failed on it): the other
# ranks never wait in a collective for an entry rank 0 is not running.
def _store():
    import torch.distributed as dist

    return dist.distributed_c10d._get_default_store()


def start_entry(entry_id: str) -> None:
    """Rank 0: the data-parallel entry `entry_id` starts now."""
    _store().set(f"demos/entry/{entry_id}", "start")


def give_up(world: World, entry_ids: list[str]) -> None:
    """Rank 0: these data-parallel entries will not run; leave the process group, so a rank
    blocked in a collective with this one gets an error now, not after TIMEOUT_S."""
    try:
        store = _store()
        for entry_id in entry_ids:
            store.set(f"demos/entry/{entry_id}", "lost")
        store.set("demos/given-up", "1")
    finally:
        leave(world)


def wait_for_entry(entry_id: str) -> bool:
    """A follower: wait, however long rank 0's entries before it take, until rank 0 starts
    the data-parallel entry `entry_id` (True) or gives it up (False). torchrun ends this
    process if rank 0 dies first."""
    key = f"demos/entry/{entry_id}"
    _store().wait([key], dt.timedelta(days=7))
    return _store().get(key) == b"start"


def rank0_gave_up() -> bool:
    """A follower, after a collective failed: whether rank 0 left the group on purpose."""
    try:
        return bool(_store().check(["demos/given-up"]))
    except Exception:  # the store went with rank 0
        return False


@contextlib.contextmanager
def rank_log(run_dir: Path, world: World) -> Iterator[logging.Logger]:
    """A follower's logger: its lines into rank<N>.log in the run folder, errors also on
    stderr (torchrun shows them); closed afterwards."""
    run_dir.mkdir(parents=True, exist_ok=True)  # another node without a shared file system
    log = logging.getLogger(f"demos.rank{world.rank}")
    log.setLevel(logging.INFO)
    log.propagate = False
    file = logging.FileHandler(run_dir / rank_log_name(world.rank), encoding="utf-8")
    file.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)-7s rank {world.rank}: "
                                        f"%(message)s"))
    console = logging.StreamHandler()
    console.setLevel(logging.ERROR)
    console.setFormatter(logging.Formatter(f"rank {world.rank}: %(message)s"))
    for h in (file, console):
        log.addHandler(h)
    try:
        yield log
    finally:
        for h in (file, console):
            log.removeHandler(h)
            h.close()


def same_everywhere(world: World, flat: Any) -> tuple[bool, str]:
    """Whether `flat` (a rank's parameters, flattened) is the same on every rank, bit for bit;
    every rank must call it."""
    import torch
    import torch.distributed as dist

    gathered = [torch.empty_like(flat) for _ in range(world.size)]
    dist.all_gather(gathered, flat)
    worst = max((g - gathered[0]).abs().max().item() for g in gathered)
    differ = [r for r, g in enumerate(gathered) if not torch.equal(g, gathered[0])]
    return not differ, (f"{flat.numel():,} parameters identical on all {world.size} ranks"
                        if not differ else f"rank(s) {', '.join(map(str, differ))} differ from "
                                           f"rank 0 by up to {worst:.3g}")
