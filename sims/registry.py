"""The simulator backends, as policy spec backends: `make_simulator("openai:gpt-5-mini")`.

The registry itself is `scope_envs.core.specs` (the bottom layer, so environments resolve spec
strings without importing this package); this module fills it in when `sims` is imported. The
same backends are declared as entry points (`scope_envs.policies` in pyproject.toml), so a spec
works even before anything imported `sims`.
"""

from __future__ import annotations

from scope_envs.core.specs import (
    POLICY_BACKENDS,
    make_policy,
    policy_backends,
    register_policy_backend,
    register_spec_wrapper,
    resolve_policy,
)

# "module:attribute" of each factory, imported on first use (keeps optional dependencies such as
# API clients or torch out of `import sims`).
SIMULATOR_BACKENDS: dict[str, str] = {
    "openai": "sims.openai_backend:OpenAISimulator",
    "anthropic": "sims.anthropic_backend:AnthropicSimulator",
    "hf": "sims.hf_backend:make_hf",
    "smollm2": "sims.hf_backend:make_smollm2",
    "vllm": "sims.vllm_backend:make_vllm",
    "vllm-async": "sims.vllm_backend:make_async_vllm",
}
for _backend, _factory in SIMULATOR_BACKENDS.items():
    register_policy_backend(_backend, _factory)

# spec wrappers (`vs5:SPEC`, `vsprob5:SPEC`, `persona:SPEC`): factory(policy, parameter)
SIMULATOR_WRAPPERS: dict[str, str] = {
    "vs": "sims.verbalized:verbalize_spec",
    "vsprob": "sims.verbalized:verbalize_prob_spec",
    "persona": "sims.persona:persona_spec",
}
for _wrapper, _factory in SIMULATOR_WRAPPERS.items():
    register_spec_wrapper(_wrapper, _factory)

BACKENDS = POLICY_BACKENDS
make_simulator = make_policy
as_simulator = resolve_policy
register_backend = register_policy_backend

__all__ = [
    "BACKENDS",
    "SIMULATOR_BACKENDS",
    "as_simulator",
    "make_simulator",
    "policy_backends",
    "register_backend",
]
