"""lenet_ddp: lenet's training on several processes under torchrun, and the checks that it is
the same training.

Document 004, first example, under DistributedDataParallel: the Net and the data of `lenet`
(demos/scenarios/lenet.py), wrapped in DDP, each rank on its DistributedSampler slice of every
global batch (`batch_size` is the global batch). DDP's side of it (the wrapping, the samplers,
a deliberate `mistake`, the replay in one process the checks compare with) is
demos/documents/parallel.py's. As one process (no torchrun) it is lenet's training.

    torchrun --standalone --nproc-per-node 2 runner.py --config configs/lenet_ddp.yaml
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from demos.scenario_api import ConfigError, Result, Scenario, param, run_alone
from demos.scenarios import lenet

if TYPE_CHECKING:
    from demos.documents.parallel import DDPTraining
    from demos.scenario_api import Context


def train(cfg: Config, ctx: Context, ddp: DDPTraining, images, labels, test_ids) -> None:
    """lenet's loop on one rank: its slice of each global batch through DDP's model; DDP
    all-reduces the gradients while backward runs, so every rank takes the same step."""
    for t in ctx.steps(cfg.epochs * ddp.n_batches):
        epoch, i = divmod(t, ddp.n_batches)
        if i == 0:
            order = ddp.shuffles(epoch)  # this rank's DistributedSampler slice, this epoch
        batch = order[i * ddp.batch:(i + 1) * ddp.batch]

        ddp.opt.zero_grad()
        with ddp.sync():  # (the no_allreduce mistake: DDP's no_sync)
            loss = F.cross_entropy(ddp.model(images[batch]), labels[batch])
            loss.backward()  # buckets all-reduced as their gradients accumulate
        ddp.opt.step()
        ctx.record(t, loss=loss)
        ddp.after_step(t)  # what the equivalence check keeps, and the rank0_raises mistake

        if i == ddp.n_batches - 1:
            ctx.record(t, always=True, epoch=epoch + 1,
                       test_accuracy=lenet.test_accuracy(ddp.model, images, labels, test_ids))


def like(optimizer: torch.optim.Optimizer) -> Callable[[torch.nn.Module, float], Any]:
    """`make(net, lr)`: an optimizer like `optimizer` (its class and settings) over `net`'s
    parameters, at the learning rate `lr` (the rank_lr mistake's, or one process's replay)."""
    return lambda net, lr: type(optimizer)(net.parameters(), **{**optimizer.defaults, "lr": lr})


@dataclass
class Config(lenet.Config):
    """lenet's training on several processes under torchrun, checked to be one training."""
    bucket_cap_mb: float = param(25.0, "the size of DDP's gradient buckets, in MiB (smaller: "
                                       "more buckets, all-reduced as backward reaches them)",
                                 gt=0, le=10**4)
    mistake: Literal["none", "no_allreduce", "local_batch", "rank_lr", "rank0_raises"] = param(
        "none", "a deliberate DDP mistake, to see the checks catch it: no_allreduce "
                "(gradients stay local), local_batch (each rank takes the whole batch), "
                "rank_lr (the ranks but 0 step with twice the lr); or rank0_raises (rank 0 "
                "alone fails at step 3: no rank is left waiting)")

    def check_world(self, size: int, where: str) -> None:
        """Under torchrun with `size` processes: what data-parallel training needs."""
        if self.batch_size % size:
            raise ConfigError(f"{where}.batch_size: {self.batch_size} is the global batch; it "
                              f"must divide among the {size} processes")
        if self.compile:
            raise ConfigError(f"{where}.compile: not under torchrun (DDP and torch.compile "
                              f"need their own settings; run it as one process)")


def train_in_parallel(cfg: Config, ctx: Context) -> Result:
    """Every rank runs this; rank 0 reports. Then the checks that make it trustworthy: the
    weights are the same on every rank, and DDP's first steps equal one process's."""
    from demos.documents.parallel import DDPTraining
    from demos.scenario_api import check, same_everywhere

    if not ctx.world.active:
        mistake = "" if cfg.mistake == "none" else f" (mistake {cfg.mistake} takes effect there)"
        ctx.warn_once(f"{cfg.id}: one process: lenet's training, without DDP; start it with "
                      f"torchrun for data-parallel training{mistake}")
        return lenet.train_and_test(cfg, ctx)
    found = lenet.walked(ctx)
    images, labels, train_ids, test_ids, _, net, optimizer = lenet.setup(cfg, ctx)
    ddp = DDPTraining(cfg, ctx, net, like(optimizer), train_ids)
    train(cfg, ctx, ddp, images, labels, test_ids)
    weights = parameters_to_vector(net.parameters()).detach()
    same, detail = same_everywhere(ctx.world, weights)  # every rank takes part
    inspection = ddp.inspection()
    found.append(check("weights identical on every rank", same, detail))
    if ctx.world.primary:
        found.append(check("DDP equals one process over the first steps",
                           *ddp.compare_with_one_process(images, labels, train_ids)))
    ctx.log.info("  DDP: %s", inspection["DDP"])
    return lenet.finish(cfg, ctx, net, train_ids, len(test_ids), found, inspection=inspection)


SCENARIO = Scenario(
    name="lenet_ddp", config=Config, run=train_in_parallel,
    document="004, first example, under DDP",
    metrics=lenet.SCENARIO.metrics, files=lenet.SCENARIO.files, dry_run={"epochs": 1},
    data_parallel=True)


if __name__ == "__main__":
    run_alone(SCENARIO)
