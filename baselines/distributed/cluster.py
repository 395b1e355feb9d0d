"""Joining a Ray cluster, or starting a local one, for a training run."""

from __future__ import annotations

from typing import Any

from scope_envs.core.extras import needs_extra

LOCAL = "local"


def connect(address: str, *, num_cpus: int | None = None) -> Any:
    """Connects this process to Ray: `"local"` starts a cluster in this machine (`num_cpus` CPUs,
    no dashboard), anything else is a cluster address (`"auto"`, `"ray://HOST:10001"`, `HOST:6379`).
    A process already connected (a test's cluster, an outer job) keeps its connection."""
    try:
        import ray
    except ImportError as error:
        raise RuntimeError(needs_extra("training on Ray", "ray", "ray")) from error
    if ray.is_initialized():
        return ray
    if address == LOCAL:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    return ray
