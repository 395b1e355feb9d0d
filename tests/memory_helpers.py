"""Peak memory of tensors on the CPU, measured as a GPU allocator would see it: every tensor an
operator returns is tracked (by its storage) until the last tensor on that storage is freed."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class PeakTracker(TorchDispatchMode):
    """Inside `with PeakTracker() as tracker:`, `tracker.peak` is the most bytes that tensors made
    in the block held at once (storages counted once however many views share them)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors alive on it]
        self.current = 0
        self.peak = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        known = {id(t) for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)}
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and id(tensor) not in known and tensor.device.type != "meta":
                self._track(tensor)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if address == 0:
            return
        entry = self.live.get(address)
        if entry is None:
            entry = self.live[address] = [storage.nbytes(), 0]
            self.current += entry[0]
            self.peak = max(self.peak, self.current)
        entry[1] += 1
        weakref.finalize(tensor, self._release, address)

    def _release(self, address: int) -> None:
        entry = self.live.get(address)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[address]


def peak_bytes(fn: Callable[[], Any]) -> int:
    with PeakTracker() as tracker:
        fn()
    return tracker.peak


class _WeightDerived(TorchDispatchMode):
    """Tracks the storages computed from weights alone (autocast's copies of float32 adapters,
    transposes): they are weights, not activations, whatever their shape."""

    def __init__(self, weights: set[int]) -> None:
        super().__init__()
        self.weights = weights

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        inputs = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        out = func(*args, **(kwargs or {}))
        derived = bool(inputs) and all(t.untyped_storage().data_ptr() in self.weights for t in inputs)
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                address = tensor.untyped_storage().data_ptr()
                if derived:
                    self.weights.add(address)
                elif address not in {t.untyped_storage().data_ptr() for t in inputs}:
                    self.weights.discard(address)  # a freed weight copy's address, reused by an activation
        return out


def saved_activations(model: torch.nn.Module, forward: Callable[[], Any]) -> dict[int, tuple[int, tuple[int, ...]]]:
    """The distinct activations autograd keeps for the backward pass of `forward()`, by storage:
    (bytes, shape of the first tensor saved on it). Not the parameters, nor what is computed
    from them alone."""
    saved: dict[int, tuple[int, tuple[int, ...]]] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        saved.setdefault(storage.data_ptr(), (storage.nbytes(), tuple(tensor.shape)))
        return tensor

    weights = _WeightDerived({p.untyped_storage().data_ptr() for p in model.parameters()})
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), weights:
        forward()
    return {address: entry for address, entry in saved.items() if address not in weights.weights}
