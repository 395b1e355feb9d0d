"""The curves of a run: training reward against held-out success, and policy entropy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baselines.training.rollouts import HELDOUT_SUCCESS


def plot_curves(history: list[dict[str, Any]], output: Path) -> list[Path]:
    """Training reward vs held-out success, and policy entropy, over steps."""
    if not history:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in history]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(steps, [r["reward_mean"] for r in history], label="training reward")
    evaluated = [r for r in history if HELDOUT_SUCCESS in r]
    left.plot([r["step"] for r in evaluated], [r[HELDOUT_SUCCESS] for r in evaluated], "o-", label="held-out success")
    left.set_xlabel("step")
    left.set_ylabel("reward / success rate")
    left.legend()
    right.plot(steps, [r.get("entropy", float("nan")) for r in history], color="tab:purple", label="agent")
    if any("simulator/entropy" in r for r in history):
        right.plot(
            steps, [r.get("simulator/entropy", float("nan")) for r in history], color="tab:orange", label="simulator"
        )
        right.legend()
    right.set_xlabel("step")
    right.set_ylabel("entropy (nats per token)")
    right.set_title("policy token entropy")
    for axis in (left, right):  # plain numbers, never an offset such as "1e-5+5.862" over the axis
        axis.ticklabel_format(axis="y", style="plain", useOffset=False)
    figure.tight_layout()
    path = output / "curves.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return [path]
