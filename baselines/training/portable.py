"""The same numbers on any CPU: the kernels under which recorded runs compute.

torch, its BLAS (MKL) and numpy each pick their kernels by the vector instructions the processor
has (AVX2, AVX-512; SVE on ARM), and each rounds a little differently. Training turns a last-bit
difference into another run: a weight that differs in its last bit flips a sampled act some steps
later, and the run takes another path (one 200-step `scope demo` run gave three held-out successes
under torch's AVX-512, AVX2 and default kernels; in float64 it still differed once numpy's AVX2
loops were off). So recorded runs train in child processes started with `portable_environment()`:
torch's default kernels, MKL's conditional-numerical-reproducibility mode and numpy's baseline
instructions, which every CPU of an architecture executes alike, on one thread. Each library reads
these once, when it is first imported: a process must have them before it imports numpy or torch,
which is why they go to children and are never set on a running process.

`kernels_in_use()` says what a process computes with; runs record it as provenance.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

# Read at import (torch, numpy) or at first use (MKL): one thread, portable code paths.
FIXED = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
NUMPY_SETTING = "NPY_DISABLE_CPU_FEATURES"


def numpy_dispatch_targets() -> list[str]:
    """The instruction sets numpy's build can dispatch to beyond its baseline, whether this CPU has
    them or not (disabling one it lacks is harmless): with all of them off, numpy runs its baseline."""
    import numpy as np

    simd = np.show_config(mode="dicts")["SIMD Extensions"]
    return [*simd.get("found", []), *simd.get("not found", [])]


def portable_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with every setting a portable process needs."""
    environment = dict(os.environ if base is None else base)
    environment.update(FIXED)
    environment[NUMPY_SETTING] = " ".join(numpy_dispatch_targets())
    return environment


@contextmanager
def portable_pool(workers: int, **kwargs: Any) -> Iterator[ProcessPoolExecutor]:
    """A process pool whose workers compute portably: spawned, not forked (a forked child keeps the
    libraries its parent loaded, with their kernels), from an environment with the settings."""
    settings = portable_environment({})
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)  # the children inherit it; this process's libraries are loaded already
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, **kwargs) as pool:
            yield pool
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def kernels_in_use() -> dict[str, Any]:
    """What could change this process's numbers: the architecture, torch's CPU kernels and threads,
    numpy's instruction sets, MKL's reproducibility mode, as they are now. Self-contained (its
    source also runs in processes that must not import this project)."""
    import os
    import platform
    import sys

    import numpy as np

    simd = np.show_config(mode="dicts")["SIMD Extensions"]
    state: dict[str, Any] = {
        "machine": platform.machine(),
        "numpy": np.__version__,
        "numpy_baseline": list(simd["baseline"]),
        "numpy_dispatch": list(simd.get("found", [])),  # what it uses beyond the baseline
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.__version__
        state["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        state["torch_threads"] = torch.get_num_threads()
    return state


def is_portable(state: dict[str, Any]) -> bool:
    """Whether a process with these kernels (`kernels_in_use()`) computes as every portable one does."""
    return (
        not state["numpy_dispatch"]
        and state["mkl_cbwr"] == FIXED["MKL_CBWR"]
        and state.get("torch_cpu_capability", "DEFAULT") == "DEFAULT"
        and state.get("torch_threads", 1) == 1
    )
