"""The verifiers plugin of SCOPE: `vf-eval scope-verifiers ...`, prime-rl's `id = "scope-verifiers"`.

verifiers imports a taskset or env id as a top-level module exporting its `Taskset`, `Env` and
`Harness` classes through `__all__` (a dotted path is not an id it can resolve); this is that
module. The classes live in `baselines.integrations.verifiers_env`.
"""

from baselines.integrations.verifiers_env import ScopeChatHarness, ScopeEnv, ScopeTaskset

__all__ = ["ScopeChatHarness", "ScopeEnv", "ScopeTaskset"]
