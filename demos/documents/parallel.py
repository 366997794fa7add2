"""LeNet data-parallel under torchrun: DDP around the Net, a DistributedSampler per rank, and
the checks that make it trustworthy (demos/docs/torchrun.md).

DDPTraining is one rank's side of it, for the scenario's training loop; `reference` and
`equivalence` replay the first steps in one process and compare.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import parameters_to_vector
from torch.utils.data import DistributedSampler

if TYPE_CHECKING:
    from demos.lab.runner.context import Context

EQUIVALENCE_STEPS = 5  # steps of DDP compared with one process
EQUIVALENCE_RTOL = 1e-2  # summation order alone: up to ~1e-3 over 120 seeds; a wrong batch: 0.6
GRAD_RTOL = 1e-4  # the first gradient, all-reduced: float32 rounding of a sum in another order


class RankShuffles:
    """Each epoch's order of one rank's training images: its DistributedSampler slice of a
    permutation of the training split, seeded with the run's seed and redrawn per epoch."""

    def __init__(self, train: torch.Tensor, size: int, rank: int, seed: int):
        self.train = train
        self.sampler = DistributedSampler(range(len(train)), num_replicas=size, rank=rank,
                                          shuffle=True, seed=seed)

    def __len__(self) -> int:
        return len(self.sampler)

    def __call__(self, epoch: int) -> torch.Tensor:
        self.sampler.set_epoch(epoch)
        return self.train[torch.tensor(list(self.sampler), device=self.train.device)]


class DDPTraining:
    """One rank's side of data-parallel training: the Net in DDP, its optimizer, its slice of
    every global batch, and what the checks need (the weights it started from, the first
    step's gradient, the weights after EQUIVALENCE_STEPS). `cfg.mistake` plants its mistake."""

    def __init__(self, cfg: Any, ctx: Context, net: torch.nn.Module, make_optimizer: Callable,
                 train: torch.Tensor):
        """`make_optimizer(net, lr)`: the optimizer over a net's parameters, at `lr`."""
        world = ctx.world
        self.cfg, self.ctx, self.net, self.make_optimizer = cfg, ctx, net, make_optimizer
        # the Net in DDP: rank 0's weights broadcast to every rank, gradient hooks in place
        self.model = DDP(net, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else
                         None, bucket_cap_mb=cfg.bucket_cap_mb)
        self.start = {k: v.clone() for k, v in net.state_dict().items()}
        lr = cfg.lr * (2 if cfg.mistake == "rank_lr" and world.rank > 0 else 1)
        self.opt = make_optimizer(net, lr)
        self.shuffles = RankShuffles(train, world.size, world.rank, ctx.seed)
        # this rank's images per step: the configured batch_size is the global batch
        self.batch = cfg.batch_size // (1 if cfg.mistake == "local_batch" else world.size)
        self.n_batches = -(-len(self.shuffles) // self.batch)
        self.k = min(EQUIVALENCE_STEPS, cfg.epochs * self.n_batches)
        self.kept: dict[str, torch.Tensor] = {}
        # what backward runs in: DDP's no_sync skips the all-reduce (the no_allreduce mistake)
        self.sync = self.model.no_sync if cfg.mistake == "no_allreduce" else contextlib.nullcontext

    def after_step(self, t: int) -> None:
        """After the optimizer step of step t (.grad is still this step's): keep what the
        equivalence check needs."""
        if self.cfg.mistake == "rank0_raises" and self.ctx.world.rank == 0 and t == 2:
            raise RuntimeError("mistake rank0_raises: rank 0 fails alone at step 3")
        if t == 0:
            self.kept["grad"] = parameters_to_vector(p.grad for p in self.net.parameters())
        if t == self.k - 1:
            self.kept["weights"] = parameters_to_vector(self.net.parameters()).detach()

    def compare_with_one_process(self, x: torch.Tensor, labels: torch.Tensor,
                                 train: torch.Tensor) -> tuple[bool, str]:
        """Whether DDP's first steps equal one process's on the same global batches, and the
        detail (see `equivalence`). Rank 0 only: the others need not wait for it."""
        one = reference(self.cfg, self.ctx, type(self.net), self.start, self.make_optimizer, x,
                        labels, train, self.k)
        return equivalence(self.kept, one, parameters_to_vector(self.start.values()), self.k)

    def inspection(self) -> dict[str, Any]:
        """What the report shows of DDP: its gradient buckets, the ranks, the batch per rank."""
        sizes, world = buckets(self.model), self.ctx.world
        note = (f"{len(sizes)} gradient bucket(s) ({', '.join(f'{b:,}' for b in sizes)} bytes; "
                f"cap {self.cfg.bucket_cap_mb:g} MiB), all-reduced over {world.size} ranks "
                f"({world.backend}) while backward runs; {self.batch} images per rank and step")
        return {"DDP": note, "gradient buckets": len(sizes)}


def buckets(model: Any) -> list[int]:
    """The bytes of each gradient bucket DDP all-reduces. DDP rebuilds its buckets after the
    first backward, in the order the gradients arrived; these are the rebuilt ones (the
    reducer's; DDP's logging data keeps the first layout)."""
    try:
        return [b.buffer().numel() * b.buffer().element_size()
                for b in model.reducer._get_zeros_like_grad_buckets()]
    except (AttributeError, RuntimeError):  # another torch: the layout DDP started with
        sizes = str(model._get_ddp_logging_data().get("bucket_sizes", ""))
        return [int(s) for s in sizes.split(",") if s.strip().isdigit()]


def global_order(n: int, size: int, seed: int, epoch: int) -> torch.Tensor:
    """One process's order of the `n` training positions in an epoch, drawn independently of
    the samplers: a seeded permutation, padded to a multiple of `size` from its start. Global
    batch i is its i-th block; DistributedSampler deals each block out across the ranks."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
    padded = -(-n // size) * size
    return torch.cat([perm, perm[:padded - n]])


def reference(cfg: Any, ctx: Context, make_net: Callable[[], torch.nn.Module], start: dict,
              make_optimizer: Callable, x: torch.Tensor, labels: torch.Tensor,
              train: torch.Tensor, steps: int) -> dict[str, Any]:
    """One process on the same global batches, in the same order, from the same weights: its
    gradient at the first step and its weights after `steps`; and whether every global batch
    was exactly what the ranks' slices put together (the samplers neither overlap nor skip)."""
    size, seed = ctx.world.size, ctx.seed
    net = make_net().to(ctx.device)
    net.load_state_dict(start)
    opt = make_optimizer(net, cfg.lr)
    ranks = [RankShuffles(train, size, r, seed) for r in range(size)]
    per_rank = cfg.batch_size // size  # what each rank should take
    n_batches = -(-len(ranks[0]) // per_rank)
    out: dict[str, Any] = {"dealt": True}
    for t in range(steps):
        epoch, i = divmod(t, n_batches)
        block = global_order(len(train), size, seed, epoch)[i * cfg.batch_size:
                                                             (i + 1) * cfg.batch_size]
        batch = train[block.to(train.device)]
        dealt = torch.cat([r(epoch)[i * per_rank:(i + 1) * per_rank] for r in ranks])
        out["dealt"] &= torch.equal(batch.sort().values, dealt.sort().values)
        loss = F.cross_entropy(net(x[batch]), labels[batch])  # the mean over the global batch
        opt.zero_grad()
        loss.backward()
        if t == 0:
            out["grad"] = parameters_to_vector(p.grad for p in net.parameters())
        opt.step()
    out["weights"] = parameters_to_vector(net.parameters()).detach()
    return out


def equivalence(ddp: dict[str, torch.Tensor], one: dict[str, Any], start: torch.Tensor,
                steps: int) -> tuple[bool, str]:
    """DDP against one process. The first step's gradient is linear in the data: DDP's
    all-reduced average must match one process's to float32 rounding (GRAD_RTOL of its
    largest element). After `steps` Adam steps the weights are compared by the distance between
    them as a share of the distance travelled: Adam turns a tiny gradient's sign into a whole
    step, so summation order alone leaves up to ~1e-3 of it; another batch leaves ~0.6."""
    g_gap = (ddp["grad"] - one["grad"]).abs().max().item() / one["grad"].abs().max().item()
    moved = (one["weights"] - start).norm().item()
    w_gap = (ddp["weights"] - one["weights"]).norm().item() / moved if moved else 0.0
    ok = one["dealt"] and g_gap <= GRAD_RTOL and w_gap <= EQUIVALENCE_RTOL
    return ok, (("" if one["dealt"] else "the ranks' slices are not the global batches; ") +
                f"first-step gradient within {g_gap:.3g} of one process's (at most "
                f"{GRAD_RTOL:g}); after {steps} steps, |DDP - one process| is {w_gap:.3g} of "
                f"the distance travelled (at most {EQUIVALENCE_RTOL:g})")
