"""Data parallelism of one learner over `torch.distributed` ranks (gloo on CPU, NCCL on GPU).

Every rank holds the same model and optimizer state and the whole batch of the step. The trainer's
`update` computes the batch's `BatchTotals` over ALL its samples, so each micro-batch's loss is its
share of the whole batch's loss; each rank then runs the backward pass of its own micro-batches
(`shard`: every `world_size`-th one), the gradients are summed over the ranks (`all_reduce_gradients`),
and every rank takes the same clipped optimizer step. The sum goes in DDP-style buckets of about
25 MB (one collective per bucket, not per tensor). The sum of the shares' gradients is the whole
batch's gradient, so the step is that of one rank with the whole batch (up to the order of float sums).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

Item = TypeVar("Item")
BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb


def buckets(tensors: Sequence[Any], bucket_bytes: int) -> list[list[Any]]:
    """`tensors` in order, grouped into runs of one dtype and device of at most `bucket_bytes`
    each (a tensor larger than that is a bucket of its own)."""
    groups: list[list[Any]] = []
    size = 0
    for tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        last = groups[-1][-1] if groups else None
        same_kind = last is not None and (last.dtype, last.device) == (tensor.dtype, tensor.device)
        if not same_kind or size + nbytes > bucket_bytes:
            groups.append([])
            size = 0
        groups[-1].append(tensor)
        size += nbytes
    return groups


@dataclass(frozen=True)
class DataParallel:
    """This process's rank among `world_size` ranks of one learner group (`torch.distributed`,
    already initialized: `init`)."""

    rank: int
    world_size: int

    @classmethod
    def init(cls, rank: int, world_size: int, *, init_method: str, backend: str | None = None) -> DataParallel:
        """Joins the process group: gloo on CPU, NCCL when CUDA is there (unless `backend` says otherwise)."""
        import torch
        import torch.distributed as dist

        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
        return cls(rank, world_size)

    def shard(self, items: Sequence[Item]) -> list[Item]:
        """This rank's share of `items` (every `world_size`-th, starting at its rank)."""
        return list(items[self.rank :: self.world_size])

    def all_reduce_gradients(self, parameters: Iterable[Any], bucket_bytes: int = BUCKET_BYTES) -> int:
        """Sums each parameter's gradient over the ranks (a rank without micro-batches adds zeros),
        as torch DDP does: the gradients flattened into buckets of about `bucket_bytes`, one
        all-reduce per bucket instead of one per tensor (a LoRA r = 32 adapter of Qwen3-4B has 504).
        Returns the number of collectives."""
        import torch
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        gradients = []
        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
            gradients.append(parameter.grad)
        collectives = 0
        for bucket in buckets(gradients, bucket_bytes):
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            for gradient, summed in zip(bucket, _unflatten_dense_tensors(flat, bucket), strict=True):
                gradient.copy_(summed)
            collectives += 1
        return collectives

    def all_reduce_sum(self, value: float) -> float:
        """A number summed over the ranks (the step's loss, from each rank's micro-batches)."""
        import torch
        import torch.distributed as dist

        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        total = torch.tensor([float(value)], dtype=torch.float64, device=device)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return float(total.item())

    @property
    def writer(self) -> bool:
        """Rank 0 writes the run's files (metrics, checkpoints, the pool); the others only read them."""
        return self.rank == 0

    def all_gather(self, items: list[Item]) -> list[Item]:
        """Every rank's `items`, concatenated in rank order (pickled: any picklable objects)."""
        import torch.distributed as dist

        gathered: list[list[Item] | None] = [None] * self.world_size
        dist.all_gather_object(gathered, items)
        return [item for part in gathered for item in part or []]

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value`, on every rank."""
        import torch.distributed as dist

        holder = [value if self.rank == 0 else None]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    @staticmethod
    def barrier() -> None:
        import torch.distributed as dist

        dist.barrier()

    @staticmethod
    def close() -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
