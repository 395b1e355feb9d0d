"""`Run`: a training run's folder, readable without the trainer that wrote it.

A run folder holds its `config.yaml`, `checkpoints/step-NNNNNN` (each verified by its manifest;
`latest` names the newest), `metrics.jsonl`, a population's simulator pool (`sim_pool/`) and the
episodes saved while it trained (`episodes.jsonl`). The `Trainer` writes it through a `Run`;
evaluation, `scope eval`, `view`, `export` and `serve` read it through one: a trained side's
policy is built from the config and its weights loaded from the newest intact checkpoint, with no
optimizer, no opponents and no Ray (a run started with `--ray` is evaluated in this process).
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baselines.training.checkpoints import atomic_write, checkpoint_steps, read_metrics, verify_checkpoint

# what a run writes into its output folder, besides its simulator pool, and a fresh start deletes;
# anything else there, such as vLLM's served adapters or wandb's own folders, is left alone
RUN_FILES = ("checkpoints", "metrics.jsonl", "tensorboard", "curves.png", "config.yaml")
POOL_FOLDER = "sim_pool"  # a population's simulator pool
CONFIG_FILE = "config.yaml"


class RunError(RuntimeError):
    """A training run that must not start or go on; the message says why and what to do."""


class NoIntactCheckpoint(RunError):
    """A resume with checkpoints, none of which is intact."""


def is_run(path: str | Path) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()


class Run:
    """The folder of one run. `config` defaults to the folder's own `config.yaml` (its
    `output_dir` set to the folder, wherever the run was written from)."""

    def __init__(self, folder: str | Path, config: Any = None) -> None:
        self.folder = Path(folder)
        if config is None:
            if not is_run(self.folder):
                raise ValueError(f"{self.folder} is not a run folder: it has no {CONFIG_FILE}")
            from baselines.training.config import load_config

            config = load_config(self.folder / CONFIG_FILE, [f"output_dir={self.folder}"])
        self.config = config
        self.checkpoints = self.folder / "checkpoints"
        self.metrics_path = self.folder / "metrics.jsonl"
        self.pool_folder = self.folder / POOL_FOLDER

    @property
    def name(self) -> str:
        return self.folder.name

    def recorded_config(self) -> dict[str, Any] | None:
        """The config the run's steps so far ran with, as it was saved (credentials redacted): its
        `config.yaml`, else the config recorded in its newest readable checkpoint; None if neither."""
        import yaml

        try:
            values = yaml.safe_load((self.folder / CONFIG_FILE).read_text())
        except (OSError, yaml.YAMLError):
            values = None
        if isinstance(values, dict):
            return values
        for _, directory in sorted(self.checkpoint_steps().items(), reverse=True):
            try:
                return dict(json.loads((directory / "state.json").read_text())["config"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return None

    @property
    def method(self) -> Any:
        from baselines.training.methods import method_for

        return method_for(self.config)

    # ---- checkpoints --------------------------------------------------------------------------------

    def checkpoint_steps(self) -> dict[int, Path]:
        return checkpoint_steps(self.checkpoints)

    def newest_intact(self, load: Callable[[Path], str | None] | None = None) -> tuple[Path, list[str]] | None:
        """The newest checkpoint that matches its manifest and that `load` (if given) loads
        (`load` returns what went wrong, or None), and what is wrong with newer ones; None when
        there is no checkpoint at all, `NoIntactCheckpoint` when none is intact. Changes nothing
        on disk, so a run can be read while it trains."""
        steps = self.checkpoint_steps()
        if not steps:
            return None
        problems = self._latest_pointer_problems(steps)
        for step in sorted(steps, reverse=True):
            problem = verify_checkpoint(steps[step]) or (load(steps[step]) if load is not None else None)
            if problem is None:
                if problems:
                    warnings.warn(
                        f"using {steps[step].name}, the newest intact checkpoint; damaged: {'; '.join(problems)}",
                        stacklevel=3,
                    )
                return steps[step], problems
            problems.append(f"{steps[step].name}: {problem}")
        raise NoIntactCheckpoint(
            f"no intact checkpoint in {self.checkpoints} to resume from ({'; '.join(problems)}); "
            "restore one, or start over with --overwrite"
        )

    def _latest_pointer_problems(self, steps: dict[int, Path]) -> list[str]:
        """A `latest` that names a checkpoint no longer there (reported with the damaged ones)."""
        pointer = self.checkpoints / "latest"
        named = pointer.read_text().strip() if pointer.is_file() else ""
        present = {directory.name for directory in steps.values()}
        return [f"{named} (named by 'latest'): missing"] if named and named not in present else []

    def point_latest(self, directory: Path) -> None:
        atomic_write(self.checkpoints / "latest", directory.name)

    def prune(self, step: int, keep: int) -> None:
        """Keeps the `keep` newest checkpoints up to `step`, ordered by step (never by name), and
        drops later ones: what is left of the steps a resume from an older one replays."""
        steps = self.checkpoint_steps()
        kept = sorted(s for s in steps if s <= step)[-keep:]
        for s, directory in steps.items():
            if s not in kept:
                shutil.rmtree(directory)

    # ---- metrics ------------------------------------------------------------------------------------

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.metrics_path)

    def keep_metrics_up_to(self, step: int) -> None:
        if self.metrics_path.exists():
            kept = [record for record in self.metrics() if record["step"] <= step]
            atomic_write(self.metrics_path, "".join(json.dumps(record) + "\n" for record in kept))

    # ---- what it trained ----------------------------------------------------------------------------

    def build_policy(self, side: str, spec: str, *, seed: int, env: Any) -> Any:
        """A fresh policy of `spec` for `side`, built with the run's generation settings."""
        from baselines.training.policy import build_policy

        config = self.config
        return build_policy(
            spec,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            device=config.device,
            lora=config.lora,
            seed=seed,
            env=env,
            side=side,
            dtype=config.dtype,
            gradient_checkpointing=config.gradient_checkpointing,
            logprob_chunk=config.logprob_chunk,
            generation_batch=config.generation_batch,
            max_model_len=config.max_model_len,
            pack_samples=config.pack_samples,
        )

    def use_cpu_threads(self) -> None:
        """torch's threads as the run's `cpu_threads` asks, when there is no GPU: whoever plays
        its policies (the trainer, `scope eval`) runs them alike."""
        import torch

        if self.config.cpu_threads > 0 and not torch.cuda.is_available():
            torch.set_num_threads(self.config.cpu_threads)

    def make_env(self) -> Any:
        from scope_envs.core.registration import find_env

        return find_env(self.config.env).make(**self.config.env_kwargs)

    def trained_sides(self) -> list[str]:
        return list(self.method.learners())

    def policy(self, side: str | None = None, *, env: Any = None, initial: bool = False) -> Any:
        """The trained policy of `side` (default: the config's `side`) at the newest intact
        checkpoint, as the trainer holds it (`loaded_step` says which); when the run has no
        checkpoint, a ValueError, or with `initial` the policy the run started from (step 0)."""
        side = side or self.config.side
        learners = self.method.learners()
        if side not in learners:
            raise ValueError(f"{self.folder}: the run trained {sorted(learners)}, not the {side!r} side")
        spec = learners[side]
        env = env if env is not None else self.make_env()
        policy = self.build_policy(side, spec.policy, seed=self.config.seed + spec.seed_offset, env=env)

        def load(directory: Path) -> str | None:
            try:
                policy.load_weights(directory / side / "policy")
            except Exception as error:  # whatever the damage: not loadable
                return f"cannot be loaded: {type(error).__name__}: {' '.join(str(error).split())[:300]}"
            return None

        newest = self.newest_intact(load)
        if newest is None and not initial:
            raise ValueError(f"{self.folder} holds no checkpoint to evaluate")
        self.loaded_step = int(newest[0].name.removeprefix("step-")) if newest is not None else 0
        return policy

    def checkpoint_identity(self) -> str:
        """The newest checkpoint as a stable string (its folder and manifest digest)."""
        import hashlib

        latest = self.checkpoints / (self.checkpoints / "latest").read_text().strip()
        manifest = (latest / "manifest.json").read_bytes() if (latest / "manifest.json").is_file() else b""
        return f"{self.folder.resolve()}:{latest.name}:{hashlib.sha256(manifest).hexdigest()[:16]}"

    def pool(self, *, env: Any = None) -> Any:
        """The run's simulator pool (read-only), its members loaded as frozen policies of the
        co-trained side; None when the run keeps none."""
        if not (self.pool_folder / "pool.json").is_file():
            return None
        from sims.pool import CheckpointPool

        memory = self.method.memory()
        side = memory.snapshot_side
        spec = self.method.learners().get(side)
        if spec is None:
            return None
        env = env if env is not None else self.make_env()
        base: list[Any] = []  # with LoRA, one resident base the members' adapters are loaded onto

        def load(directory: Path) -> Any:
            if base:
                return base[0].snapshot(directory, name=f"pool-{directory.name}")
            policy = self.build_policy(side, spec.policy, seed=self.config.seed + spec.seed_offset, env=env)
            if getattr(policy, "is_lora", False):
                base.append(policy)
                return policy.snapshot(directory, name=f"pool-{directory.name}")
            policy.load_weights(directory)
            return policy.freeze_for_generation() if hasattr(policy, "freeze_for_generation") else policy

        return CheckpointPool(self.pool_folder, max_size=self.config.pool_size, loader=load, read_only=True)
