"""Where training metrics go: JSONL always, TensorBoard when installed, Weights & Biases when asked."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any


class MetricsLog:
    def __init__(
        self,
        output: Path,
        *,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "scope",
        wandb_mode: str = "online",
        config: dict[str, Any] | None = None,
    ) -> None:
        self.path = output / "metrics.jsonl"
        self._tensorboard = None
        self._wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tensorboard = SummaryWriter(log_dir=str(output / "tensorboard"))
            except ImportError:
                pass  # TensorBoard is optional (the `hf` extra installs it)
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                warnings.warn(
                    "wandb=true but the 'wandb' package is not installed; logging to JSONL and TensorBoard only",
                    stacklevel=2,
                )
            else:
                self._wandb = wandb_module.init(
                    project=wandb_project, mode=wandb_mode, config=config or {}, dir=str(output)
                )

    def write(self, record: dict[str, Any], *, durable: bool = True) -> None:
        """Appends a step's line. `durable` also forces it to disk: the trainer asks for that before
        each checkpoint, so the lines a resume keeps survive a power cut like the checkpoint; lines
        after it are dropped by a resume anyway, and forcing each one costs a disk flush a step."""
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        step = int(record["step"])
        numbers = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
        if self._tensorboard is not None:
            for name, value in numbers.items():
                self._tensorboard.add_scalar(name, value, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
