"""A data-parallel learner group on Ray: `scope train CONFIG --ray [ADDRESS] learner_ranks=N`.

`train_on_ray` reserves one placement group of N bundles (`cpus_per_rank` CPUs and
`gpus / learner_ranks` GPUs each, packed on as few nodes as hold them) and starts one `LearnerRank`
actor per bundle. Every rank runs the whole trainer in step with the others (`Trainer` with its
`DataParallel` rank, over `torch.distributed`: gloo on CPU, NCCL on GPU):

* it plays every N-th rollout group of a step with its own copy of each trained model, and the
  episodes are all-gathered, so every rank holds the step's whole batch (the groups' seeds make
  it the batch of one process playing them all);
* each learner (the agent's; the simulator's when co-training) runs the backward pass of its
  share of the micro-batches, sums the gradients over the ranks and takes the same optimizer
  step, so every rank holds the same weights after each update and generates with them
  (a vLLM engine is re-synced after each update as in one process): the colocated placement
  of learner and generation engine;
* rank 0 writes the run's files (metrics, episodes, checkpoints, the simulator pool) and the
  other ranks read the pool and, on resume, the checkpoint rank 0 continues from: the output
  folder must be on storage every node of the group sees.

A rank that dies (killed, out of memory, its node lost) ends the run: the other ranks are
stopped and `LearnerRankLost` says which; `--resume` starts every rank from the newest intact
checkpoint, and the run continues exactly.
"""

from __future__ import annotations

import socket
from typing import Any

from baselines.distributed.cluster import connect
from baselines.distributed.data_parallel import DataParallel
from baselines.training.config import TrainConfig
from baselines.training.trainer import RunError, Trainer

PLACEMENT_TIMEOUT_S = 120.0
DEATH_GRACE_S = 5.0  # after a rank's error, how long to look for a rank that died and caused it


class LearnerRankLost(RunError):
    """A rank of the learner group died; the run stopped at its last checkpoint."""


class LearnerRank:
    """One rank of the group: a Ray actor that runs the trainer with its `DataParallel` rank."""

    def __init__(self, config: TrainConfig, rank: int, world_size: int) -> None:
        self.config, self.rank, self.world_size = config, rank, world_size

    def rendezvous(self) -> str:
        """A `tcp://` address on this rank's node where the group meets (asked of rank 0)."""
        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return f"tcp://{ray.util.get_node_ip_address()}:{port}"

    def run(self, rendezvous: str, *, resume: bool, overwrite: bool, progress: Any = None) -> list[dict[str, Any]]:
        """Trains to the end; rank 0 returns the run's metrics and puts each step's on `progress`."""
        backend = "gloo" if (self.config.device or "").startswith("cpu") else None  # else NCCL where CUDA is
        ranks = DataParallel.init(self.rank, self.world_size, init_method=rendezvous, backend=backend)
        try:
            trainer = Trainer(self.config, data_parallel=ranks)
            on_step = progress.put if progress is not None else None
            return trainer.run(resume=resume, overwrite=overwrite, progress=False, on_step=on_step)
        finally:
            DataParallel.close()

    def pid(self) -> int:
        import os

        return os.getpid()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def rank_bundle(config: TrainConfig, cluster_gpus: float) -> dict[str, float]:
    """The resources of one rank: its CPUs, and its share of the run's GPUs where the cluster has any."""
    bundle = {"CPU": float(config.cpus_per_rank)}
    if cluster_gpus > 0:
        if config.gpus % config.learner_ranks:  # NCCL refuses two ranks on one GPU
            raise RunError(f"gpus ({config.gpus}) must be a multiple of learner_ranks ({config.learner_ranks})")
        bundle["GPU"] = float(config.gpus // config.learner_ranks)
    return bundle


class LearnerGroup:
    """The ranks of one run, placed; `train` runs them and `close` releases them."""

    def __init__(self, config: TrainConfig) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        connect(config.ray_address, num_cpus=max(2, int(config.learner_ranks * config.cpus_per_rank)))
        self.config = config
        bundle = rank_bundle(config, ray.cluster_resources().get("GPU", 0.0))
        self.placement = placement_group([bundle] * config.learner_ranks, strategy="PACK")
        ready, _ = ray.wait([self.placement.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            self._remove_placement()
            raise RunError(
                f"Ray cannot place {config.learner_ranks} learner ranks of {bundle} in "
                f"{PLACEMENT_TIMEOUT_S:.0f} s; the cluster has {ray.cluster_resources()}"
            )
        actor = ray.remote(LearnerRank)
        self.ranks = [
            actor.options(
                num_cpus=bundle["CPU"],
                num_gpus=bundle.get("GPU", 0.0),
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=rank),
            ).remote(config, rank, config.learner_ranks)
            for rank in range(config.learner_ranks)
        ]

    def train(self, *, resume: bool = False, overwrite: bool = True, progress: bool = True) -> list[dict[str, Any]]:
        """Runs every rank to the end; rank 0's metrics. Raises `LearnerRankLost` when a rank
        dies, and a rank's own error (the same on every rank) as it is."""
        import ray
        from ray.util.queue import Empty, Queue
        from tqdm.auto import tqdm

        steps = Queue(actor_options={"num_cpus": 0})
        rendezvous = ray.get(self.ranks[0].rendezvous.remote())
        running = {
            member.run.remote(
                rendezvous, resume=resume, overwrite=overwrite, progress=steps if rank == 0 else None
            ): rank
            for rank, member in enumerate(self.ranks)
        }
        bar = tqdm(total=self.config.steps, desc=f"train ({len(self.ranks)} ranks)", unit="step", disable=not progress)
        history: list[dict[str, Any]] = []
        try:
            while running:
                done, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
                while True:
                    try:
                        record = steps.get_nowait()
                    except Empty:
                        break
                    bar.update(record["step"] - bar.n)
                    bar.set_postfix(reward=f"{record['reward_mean']:.3f}")
                for ref in done:
                    rank = running.pop(ref)
                    result = self._result(ref, rank, running)
                    history = result if rank == 0 else history
        finally:
            bar.close()
            steps.shutdown()
        return history

    @staticmethod
    def _result(ref: Any, rank: int, others: dict[Any, int]) -> Any:
        """A rank's result, or the error that ends the run: a rank that died is named (the others
        then fail in their collectives, and their errors are only the echo of its death)."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        def lost(dead: int, error: Exception) -> LearnerRankLost:
            return LearnerRankLost(
                f"learner rank {dead} died ({' '.join(str(error).split())[:300]}); "
                "the run stopped at its last checkpoint: --resume continues it"
            )

        try:
            return ray.get(ref)
        except RayActorError as error:
            raise lost(rank, error) from None
        except RayTaskError as error:
            ended, _ = ray.wait(list(others), num_returns=len(others), timeout=DEATH_GRACE_S)
            for other in ended:
                try:
                    ray.get(other)
                except RayActorError as death:
                    raise lost(others[other], death) from None
                except RayTaskError:
                    pass
            raise (error.cause if isinstance(error.cause, Exception) else error) from error

    def pids(self) -> list[int]:
        import ray

        return ray.get([member.pid.remote() for member in self.ranks])

    def close(self) -> None:
        import ray

        for member in self.ranks:
            ray.kill(member)
        self.ranks = []
        self._remove_placement()

    def _remove_placement(self) -> None:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(self.placement)


def train_on_ray(
    config: TrainConfig, *, resume: bool = False, overwrite: bool = True, progress: bool = True
) -> list[dict[str, Any]]:
    """`scope train` with `learner_ranks` > 1: the run's metrics, as `Trainer.run` returns them."""
    group = LearnerGroup(config)
    try:
        return group.train(resume=resume, overwrite=overwrite, progress=progress)
    finally:
        group.close()
