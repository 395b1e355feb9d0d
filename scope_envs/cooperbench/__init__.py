"""CooperBench (arXiv 2601.13295): `scope/CooperBench-v0` and `scope/CooperBench-User-v0`."""

from scope_envs.cooperbench.dataset import Feature, PairItem, Task, load_task, locate_dataset
from scope_envs.cooperbench.env import CooperBenchEnv, parallel_env
from scope_envs.cooperbench.evaluation import Evaluation, Evaluator, MergeResult, SuiteResult
from scope_envs.cooperbench.sandbox import Isolation, Limits, RunResult, Sandbox, probe_isolation

__all__ = [
    "CooperBenchEnv",
    "Evaluation",
    "Evaluator",
    "Feature",
    "Isolation",
    "Limits",
    "MergeResult",
    "PairItem",
    "RunResult",
    "Sandbox",
    "SuiteResult",
    "Task",
    "load_task",
    "locate_dataset",
    "parallel_env",
    "probe_isolation",
]
