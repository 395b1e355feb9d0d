"""A learner group's gradient sum over 2 real gloo ranks: bucketed as torch DDP buckets them (one
collective per bucket, not per tensor), and equal to the sum of each rank's gradients."""

from __future__ import annotations

import multiprocessing
import socket

import pytest

torch = pytest.importorskip("torch")

from baselines.distributed import data_parallel  # noqa: E402
from baselines.distributed.data_parallel import DataParallel  # noqa: E402

SHAPES = [(8, 64), (64, 8), (3,), (8, 64), (64, 8), (1000,), (5, 5)] * 20  # 140 tensors


class Holder:
    def __init__(self, gradient) -> None:
        self.grad = gradient


def gradients_of(rank: int) -> list:
    generator = torch.Generator().manual_seed(rank)
    return [torch.randn(shape, generator=generator) for shape in SHAPES]


def _rank(rank: int, init_method: str, results) -> None:
    group = DataParallel.init(rank, 2, init_method=init_method, backend="gloo")
    try:
        holders = [Holder(g) for g in gradients_of(rank)]
        collectives = group.all_reduce_gradients(holders, bucket_bytes=16 * 1024)
        results.put((rank, collectives, [h.grad.numpy().copy() for h in holders]))
    finally:
        DataParallel.close()


def test_gradients_are_summed_in_buckets_over_two_gloo_ranks():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        init_method = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=_rank, args=(rank, init_method, results)) for rank in range(2)]
    for process in ranks:
        process.start()
    outcome = dict(
        (rank, (collectives, grads)) for rank, collectives, grads in (results.get(timeout=120) for _ in ranks)
    )
    for process in ranks:
        process.join(timeout=30)
    expected = [a + b for a, b in zip(gradients_of(0), gradients_of(1))]
    total_bytes = sum(t.numel() * 4 for t in expected)
    for collectives, summed in outcome.values():
        assert total_bytes // (16 * 1024) <= collectives <= total_bytes // (16 * 1024) + 2
        assert collectives < len(SHAPES) / 5  # not one collective per tensor
        for got, want in zip(summed, expected):
            torch.testing.assert_close(torch.from_numpy(got), want)


def test_buckets_keep_the_order_and_never_mix_dtypes():
    tensors = [torch.zeros(256), torch.zeros(256), torch.zeros(10, dtype=torch.float64), torch.zeros(2000)]
    groups = data_parallel.buckets(tensors, bucket_bytes=2048)
    assert [len(g) for g in groups] == [2, 1, 1]  # 1 KB + 1 KB; the float64 one; 8 KB alone
    assert [t for g in groups for t in g] == tensors
