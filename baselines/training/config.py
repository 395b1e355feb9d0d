"""Training configuration: one dataclass, loaded from YAML with `key=value` overrides, validated;
saved with its credentials redacted (`baselines.training.secrets`), and checked on `--resume`
against the config the run's steps so far ran with (`resume_changes`)."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from baselines.arguments import parse_key_value
from baselines.training.advantages import ESTIMATORS
from baselines.training.loss import AGGREGATIONS
from baselines.training.methods import method_for
from baselines.training.policy import language_model_of
from baselines.training.rollouts import DEFAULT_ROLLOUT, ROLLOUTS
from baselines.training.secrets import redacted, without_redacted
from scope_envs.core.errors import UsageError
from sims.opponents import POOL_DRAWS
from sims.pool import SAMPLING
from sims.verbalized import DRAWS as VS_DRAWS

DTYPES = ("float32", "bfloat16")
SIMULATOR_REWARDS = ("adversarial", "cooperative", "curriculum")
# population: each group's simulator drawn uniformly from the pool snapshots and the live one, or
# always the latest of them (the live simulator)
POOL_SAMPLING = SAMPLING


@dataclass
class TrainConfig:
    # what is trained, where
    env: str = ""  # a registered environment (`scope envs` lists them)
    about: str = ""  # what the run shows, in a sentence; `scope train` prints it beside the results
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    side: str = "agent"
    policy: str = "tiny"  # "tiny" (random, for tests), "smollm2", or "hf:MODEL_OR_PATH"
    device: str | None = None
    # torch's threads when the run has no GPU (0: torch's default, one per core). A tiny model on a
    # busy two-core machine ran in a seventh of the CPU time on one thread: its threads mostly wait
    cpu_threads: int = 0
    gpus: int = 1  # GPUs the run may use (`scope plan` checks the run fits them)
    gpu_memory_gb: float = 80.0  # memory of each GPU, in GB (10^9 bytes), as vendors state it
    # precision: frozen weights and compute in `dtype`; trained parameters (full model or LoRA
    # adapters) and their optimizer state always stay float32, so small updates are not rounded away
    dtype: str = "float32"  # or "bfloat16"
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory)
    logprob_chunk: int = 0  # positions per chunk for training log-probs and entropies (0: all at once)
    generation_batch: int = 32  # prompts per batched generate call of a local model
    # train the samples that share their first prompt (a group's) as one packed row, that prompt read once
    pack_samples: bool = True
    # tokens of one side's longest sequence (prompt and generated turns), on every generation path: a
    # turn is cut to fit, and an episode whose next prompt leaves no room ends as `max_model_len`
    max_model_len: int = 4096
    generation_engine: str = "transformers"  # or "vllm" (GPU; needs lora) for the trained policy's turns
    vllm_gpu_memory_utilization: float = 0.4  # the share of GPU memory vLLM takes; the rest trains
    # against whom: a method of `baselines.training.methods` by name, or "module:Class" of one of your own
    method: str = "single"
    simulators: list[str] = field(default_factory=lambda: ["scripted"])
    vs_k: int = 5
    # Verbalized Sampling's draw among the k candidates: uniform ("random", the paper's main runs) or by
    # their verbalized probabilities ("prob", its ablation)
    vs_draw: str = "random"
    # co-training: the simulator is a trainable policy too (methods cotrain, curriculum, population)
    simulator_policy: str | None = None  # its initial checkpoint; by default the same as `policy`
    simulator_lr: float | None = None  # by default `lr`
    simulator_kl_coef: float = 0.0
    simulator_reward: str = "adversarial"  # adversarial (1 - r), cooperative (r), curriculum
    # subtracted once from the curriculum reward of an episode in which the simulator made a tool error
    tool_error_penalty: float = 0.1
    pool_every: int = 16  # population: snapshot the simulator every N steps
    pool_size: int = 10
    pool_sampling: str = "uniform"  # see POOL_SAMPLING
    # population: "batch", one member (uniform over the snapshots and the live simulator) plays every group of
    # a step, as the paper draws one per rollout batch; "group", one drawn per group
    pool_draw: str = "batch"
    # population, optional (the paper has none): at least this share of each step's groups go to the live
    # simulator, the only member that learns
    live_min_share: float = 0.0
    # rollouts
    steps: int = 10
    groups_per_step: int = 4
    group_size: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 48
    # chat rollouts: "lockstep" (every round of turns waits for its slowest reply) or "async" (each
    # episode advances as soon as its own reply arrives; same episodes, see scope_envs.core.async_rollout)
    rollout: str = DEFAULT_ROLLOUT
    # Ray (the `ray` extra): "local" starts a cluster on this machine, else a cluster address; rollout
    # workers then play the groups whose players are all frozen or small (baselines.distributed.ray_rollout)
    ray_address: str | None = None
    ray_workers: int = 2
    ray_groups_per_task: int = 1  # consecutive groups per rollout-worker task
    # a data-parallel learner group of this many ranks on Ray, each a placement-group bundle of
    # cpus_per_rank CPUs and gpus / learner_ranks GPUs (baselines.distributed.learner_group)
    learner_ranks: int = 1
    cpus_per_rank: float = 1.0
    # update
    lr: float = 1e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    micro_batch: int = 8
    advantage: str = "grpo"
    scale_std: bool = True
    rae_decay: float = 0.9
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    aggregation: str = "token_mean"
    lora: dict[str, Any] | None = None
    # evaluation, logging, checkpoints
    eval_every: int = 5  # steps between held-out evaluations (and one after the last step); 0: none
    eval_simulators: list[str] = field(default_factory=lambda: ["scripted"])
    eval_tasks: int = 4
    eval_samples: int = 1
    checkpoint_every: int = 5
    keep_checkpoints: int = 2
    save_episodes: int = 2  # episodes of each step saved to output_dir/episodes.jsonl (`scope view`); 0: none
    # a training step in which more than this share of episodes ended in `policy_error` (a policy
    # could not reply) stops the run: a broken simulator must not pass for a reward of 0
    max_failed_episode_share: float = 0.5
    # such episodes never enter the loss; a group left with fewer than this many (or than group_size)
    # is dropped whole
    min_group_episodes: int = 2
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "scope"
    wandb_mode: str = "online"  # "offline" writes a run to sync later
    seed: int = 0
    output_dir: str = "runs/train"

    def validate(self) -> TrainConfig:
        # text where a number belongs (`steps=many`) would fail the comparisons below with a TypeError
        problems = [
            f"{f.name} must be a number, got {getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if _is_number(f.default) and not _is_number(getattr(self, f.name))
        ]
        if problems:
            raise ValueError("invalid training config:\n  " + "\n  ".join(problems))
        if not self.env:
            problems.append("env is required: a registered environment name (`scope envs` lists them)")
        try:
            problems.extend(method_for(self).problems())
        except ValueError as error:
            problems.append(str(error))
        if self.advantage not in ESTIMATORS:
            problems.append(f"advantage must be one of {ESTIMATORS}, got {self.advantage!r}")
        if self.aggregation not in AGGREGATIONS:
            problems.append(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.side not in {"agent", "user"}:
            problems.append(f"side must be 'agent' or 'user', got {self.side!r}")
        if self.rollout not in ROLLOUTS:
            problems.append(f"rollout must be one of {tuple(ROLLOUTS)}, got {self.rollout!r}")
        if self.ray_address is not None and ("=" in self.ray_address or self.ray_address.endswith((".yaml", ".yml"))):
            problems.append(
                f"ray_address {self.ray_address!r} is an override or a config file, not a Ray address: "
                "put --ray after them (`scope train CONFIG key=value --ray [ADDRESS]`)"
            )
        if self.learner_ranks > 1 and self.ray_address is None:
            problems.append(f"learner_ranks {self.learner_ranks} runs its ranks on Ray: add --ray [ADDRESS]")
        if self.cpus_per_rank <= 0:
            problems.append(f"cpus_per_rank must be positive, got {self.cpus_per_rank}")
        if self.generation_engine not in {"transformers", "vllm"}:
            problems.append(f"generation_engine must be 'transformers' or 'vllm', got {self.generation_engine!r}")
        if self.generation_engine == "vllm" and not (self.lora and language_model_of(self.policy)):
            problems.append(
                "generation_engine 'vllm' serves the trained policy as a LoRA adapter: set lora and an hf: policy"
            )
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not 0.0 <= self.live_min_share <= 1.0:
            problems.append(f"live_min_share must be in [0, 1], got {self.live_min_share}")
        if self.simulator_reward not in SIMULATOR_REWARDS:
            problems.append(f"simulator_reward must be one of {SIMULATOR_REWARDS}, got {self.simulator_reward!r}")
        if self.pool_sampling not in POOL_SAMPLING:
            problems.append(f"pool_sampling must be one of {POOL_SAMPLING}, got {self.pool_sampling!r}")
        if self.pool_draw not in POOL_DRAWS:
            problems.append(f"pool_draw must be one of {POOL_DRAWS}, got {self.pool_draw!r}")
        if self.vs_draw not in VS_DRAWS:
            problems.append(f"vs_draw must be one of {VS_DRAWS}, got {self.vs_draw!r}")
        for name in (
            "steps",
            "groups_per_step",
            "group_size",
            "max_new_tokens",
            "micro_batch",
            "eval_tasks",
            "eval_samples",
            "keep_checkpoints",
            "generation_batch",
            "max_model_len",
            "gpus",
            "ray_workers",
            "ray_groups_per_task",
            "learner_ranks",
            "min_group_episodes",
            "checkpoint_every",
            "pool_every",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1")
        if self.eval_every < 0:
            problems.append(f"eval_every must be 0 (no evaluation) or a number of steps, got {self.eval_every}")
        if self.cpu_threads < 0:
            problems.append("cpu_threads must be 0 (torch's default) or a positive number of threads")
        if self.logprob_chunk < 0:
            problems.append("logprob_chunk must be 0 (no chunking) or a positive number of positions")
        if not 0.0 <= self.max_failed_episode_share <= 1.0:
            problems.append(f"max_failed_episode_share must be in [0, 1], got {self.max_failed_episode_share}")
        if self.group_size < 2 and self.advantage in {"grpo", "dr_grpo"}:
            problems.append("group advantages need group_size >= 2")
        if problems:
            raise ValueError("invalid training config:\n  " + "\n  ".join(problems))
        return self


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shipped_configs(kind: str = "configs") -> list[Path]:
    """The YAML files each benchmark ships in its own folder: training configs
    (`scope_envs/<benchmark>/configs/`) or `scope demo` studies (`.../studies/`)."""
    import scope_envs

    return sorted(Path(scope_envs.__file__).parent.glob(f"*/{kind}/*.yaml"))


def find_config(name: str | Path, kind: str = "configs") -> Path:
    """A config file: a path, or the name of a shipped one (`NAME` or `NAME.yaml`)."""
    path = Path(name)
    if path.is_file() or len(path.parts) > 1:
        return path  # a path is never mistaken for a shipped config of the same file name
    shipped = shipped_configs(kind)
    matches = [config for config in shipped if config.stem == path.name.removesuffix(".yaml")]
    if len(matches) != 1:
        known = ", ".join(config.stem for config in shipped)
        raise UsageError(f"no file {str(name)!r}, nor a shipped one of that name; shipped: {known}")
    return matches[0]


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """A config from a YAML file or shipped config (or the defaults) and `key=value` overrides
    (values read by `baselines.arguments.parse_value`, as every `scope` command reads them)."""
    values: dict[str, Any] = {}
    if path is not None:
        with find_config(path).open() as file:  # read from the file, a YAML error names it
            loaded = yaml.safe_load(file) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: a training config is a mapping of keys to values")
        values.update(without_redacted(loaded))  # a saved run's config: its keys come from elsewhere
    values.update(parse_key_value(item, "an override") for item in overrides)
    unknown = [key for key in values if key not in FIELDS]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, FIELDS, n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(f"unknown config keys: {', '.join(hints)}. Valid keys: {', '.join(FIELDS)}")
    return TrainConfig(**values).validate()


def saved_values(config: TrainConfig) -> dict[str, Any]:
    """The config's values as a run saves, logs and prints them: without credentials."""
    return redacted(dataclasses.asdict(config))


def dump_config(config: TrainConfig) -> str:
    return yaml.safe_dump(saved_values(config), sort_keys=False)


# What `--resume` may change: how long the run goes on (`steps`, to extend it), where it lives, what
# it logs and which checkpoints it keeps; none alters what a step computes. Any other change would
# make the run's config describe steps that ran with other values, so a resume refuses it.
RESUMABLE_CHANGES = (
    "steps",
    "output_dir",
    "about",
    "checkpoint_every",
    "keep_checkpoints",
    "save_episodes",
    "tensorboard",
    "wandb",
    "wandb_project",
    "wandb_mode",
)


# What a run saved before a key existed computed with, where that differs from the key's default now:
# pool members were drawn per group before `pool_draw` (whose default is now the paper's per batch).
BEFORE_THE_KEY: dict[str, Any] = {"pool_draw": "group"}


def resume_changes(recorded: dict[str, Any], config: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """The keys outside `RESUMABLE_CHANGES` whose value in `config` differs from `recorded` (the
    saved config of the run's steps so far), as (recorded, new). Credentials are left out of both:
    a key given again, or now taken from the environment, changes nothing. A key `recorded` lacks
    (saved before the key existed) ran as the code did then: `BEFORE_THE_KEY`, else its default."""
    defaults = {**saved_values(TrainConfig()), **BEFORE_THE_KEY}
    old = without_redacted({**defaults, **{key: value for key, value in recorded.items() if key in FIELDS}})
    new = without_redacted(saved_values(config))
    return {
        key: (old.get(key), new.get(key))
        for key in FIELDS
        if key not in RESUMABLE_CHANGES and _comparable(old.get(key)) != _comparable(new.get(key))
    }


def _comparable(value: Any) -> Any:
    """A value as YAML saves it (a tuple is a list), so a recorded value equals the one it came from."""
    return yaml.safe_load(yaml.safe_dump(value))
