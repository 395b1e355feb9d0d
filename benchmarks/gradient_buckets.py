"""A learner group's gradient all-reduce with 2 ranks on gloo: one collective per tensor (what the
learner group did before) vs DDP-style buckets (`DataParallel.all_reduce_gradients`), over the
gradients of a LoRA r = 32 adapter on every linear module of SmolLM2-135M (420 tensors, 39 MB).

Rank 0 is the caller; rank 1 is a process started by `start_peer` that mirrors each call: rank 0
broadcasts what to do (a one-number command), then both ranks reduce. Each rank computes on one
thread, as a CPU learner rank does (`cpus_per_rank` 1; Ray gives an actor one OpenMP thread)."""

from __future__ import annotations

import multiprocessing
import socket
from typing import Any

from baselines.apps.plan import KNOWN_ARCHITECTURES, LINEAR_MODULES
from baselines.distributed.data_parallel import DataParallel

STOP, PER_TENSOR, BUCKETED = 0, 1, 2


def lora_gradients(rank: int = 32, seed: int = 0) -> list[Any]:
    import torch

    architecture = KNOWN_ARCHITECTURES["smollm2-135m"]
    generator = torch.Generator().manual_seed(seed)
    shapes = []
    for _ in range(architecture.layers):
        for name in LINEAR_MODULES:
            fan_in, fan_out = architecture.linear_shapes()[name]
            shapes += [(rank, fan_in), (fan_out, rank)]  # lora_A, lora_B
    return [torch.randn(shape, generator=generator) for shape in shapes]


def per_tensor(gradients: list[Any]) -> int:
    import torch.distributed as dist

    for gradient in gradients:
        dist.all_reduce(gradient, op=dist.ReduceOp.SUM)
    return len(gradients)


class Holder:
    """Parameters whose `.grad` are the given tensors (what `all_reduce_gradients` takes)."""

    def __init__(self, gradient: Any) -> None:
        self.grad = gradient


def reduce(mode: int, gradients: list[Any]) -> int:
    """One all-reduce of `gradients` in `mode`; the number of collectives."""
    if mode == PER_TENSOR:
        return per_tensor(gradients)
    return DataParallel(0, 2).all_reduce_gradients([Holder(g) for g in gradients])


def command(mode: int) -> int:
    import torch
    import torch.distributed as dist

    order = torch.tensor([mode])
    dist.broadcast(order, src=0)
    return int(order.item())


def _peer(init_method: str) -> None:
    import torch

    torch.set_num_threads(1)
    DataParallel.init(1, 2, init_method=init_method, backend="gloo")
    gradients = lora_gradients(seed=1)
    try:
        while (mode := command(STOP)) != STOP:
            reduce(mode, gradients)
    finally:
        DataParallel.close()


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def start_peer() -> Any:
    """Rank 1 in a new process, and this process joined as rank 0; `stop_peer` ends both."""
    import torch

    torch.set_num_threads(1)
    init_method = free_address()
    peer = multiprocessing.get_context("spawn").Process(target=_peer, args=(init_method,), daemon=True)
    peer.start()
    DataParallel.init(0, 2, init_method=init_method, backend="gloo")
    return peer


def stop_peer(peer: Any) -> None:
    command(STOP)
    DataParallel.close()
    peer.join(timeout=30)


def step(mode: int, gradients: list[Any]) -> int:
    """What rank 0 times: the command, then the reduction; the number of tensors reduced."""
    command(mode)
    reduce(mode, gradients)
    return len(gradients)
