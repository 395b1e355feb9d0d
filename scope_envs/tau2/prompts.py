"""The prompts of tau2-bench, taken from the installed `tau2` package.

tau2 keeps its agent instruction, its user-simulator prompt template and its default first agent
message in modules that import an LLM client (litellm, seconds to import). They are read here from
those modules' source with `ast`, without importing them, so the texts are exactly tau2's and
building an env stays fast. The user-simulation guidelines are a data file of the package.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

# tau2's `###STOP###`, `###TRANSFER###` and `###OUT-OF-SCOPE###` (tau2.user.base), and the agent's stop token.
USER_STOP = "###STOP###"
USER_TRANSFER = "###TRANSFER###"
USER_OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
AGENT_STOP = "###STOP###"
TRANSFER_TOOL = "transfer_to_human_agents"


def _module_source(module: str) -> tuple[str, ast.Module]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"cannot locate {module} in the installed tau2 package")
    source = Path(spec.origin).read_text(encoding="utf-8")
    return spec.origin, ast.parse(source)


def _assignment(module: str, name: str) -> ast.expr:
    origin, tree = _module_source(module)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise ImportError(f"{name} not found in {origin}; this tau2 version is not supported")


def _string_constant(module: str, name: str) -> str:
    """A module-level string constant of tau2 (`NAME = "..."`, or a literal with `.strip()`), evaluated."""
    value = _assignment(module, name)
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "strip"
        and not value.args
        and isinstance(value.func.value, ast.Constant)
        and isinstance(value.func.value.value, str)
    ):
        return value.func.value.value.strip()
    raise ImportError(f"{module}.{name} is not a string constant; this tau2 version is not supported")


def _keyword_constant(module: str, name: str, keyword: str) -> Any:
    """The constant keyword argument `keyword` of a module-level `NAME = Call(...)` of tau2."""
    value = _assignment(module, name)
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == keyword and isinstance(kw.value, ast.Constant):
                return kw.value.value
    raise ImportError(f"{module}.{name} has no constant {keyword!r}; this tau2 version is not supported")


@lru_cache(maxsize=1)
def agent_prompt_parts() -> tuple[str, str]:
    """tau2's `(SYSTEM_PROMPT, AGENT_INSTRUCTION)` of `LLMAgent`."""
    module = "tau2.agent.llm_agent"
    return _string_constant(module, "SYSTEM_PROMPT"), _string_constant(module, "AGENT_INSTRUCTION")


def agent_system_prompt(policy: str) -> str:
    """The system prompt tau2's `LLMAgent` runs with: its instruction and the domain policy."""
    template, instruction = agent_prompt_parts()
    return template.format(domain_policy=policy, agent_instruction=instruction)


@lru_cache(maxsize=1)
def user_prompt_template() -> str:
    return _string_constant("tau2.user.user_simulator", "SYSTEM_PROMPT")


@lru_cache(maxsize=1)
def user_guidelines() -> str:
    """tau2's user-simulation guidelines (the variant for users without tools)."""
    from tau2.utils import DATA_DIR

    return (Path(DATA_DIR) / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text(encoding="utf-8")


def user_system_prompt(user_scenario: Any) -> str:
    """The system prompt tau2's `UserSimulator` runs with: the guidelines and the task's user scenario."""
    return user_prompt_template().format(global_user_sim_guidelines=user_guidelines(), instructions=str(user_scenario))


@lru_cache(maxsize=1)
def first_agent_message() -> str:
    """tau2's fixed first agent turn (`DEFAULT_FIRST_AGENT_MESSAGE`)."""
    return str(_keyword_constant("tau2.orchestrator.orchestrator", "DEFAULT_FIRST_AGENT_MESSAGE", "content"))


# tau2's natural-language assertion judge (tau2.evaluator.evaluator_nl_assertions), verbatim. The
# module imports an LLM client and calls a fixed model, so the prompt is kept here and sent to the
# judge the caller supplies; a test checks that it still matches the installed tau2.
NL_JUDGE_SYSTEM_PROMPT = """
        TASK
        - You will be given a list of expected outcomes and a conversation that was collected during a test case run.
        - The conversation is between an agent and a customer.
        - Your job is to evaluate whether the agent satisfies each of the expected outcomes.
        - Grade each expected outcome individually.

        FORMAT
        - Your response should be a JSON object with the following fields:
        - `reasoning`: a short explanation for your classification
        - `metExpectation`: `true` if the agent satisfies the expected outcomes, `false` otherwise
        - `expectedOutcome`: repeat the expectation from the input that you are grading
        
        Example response structure:
        {
            "results": [
                {
                    "expectedOutcome": "<one of the expected outcomes from the input>",
                    "reasoning": "<reasoning trace>",
                    "metExpectation": <false or true>,
                }
            ]
        }
        """  # noqa: W293

NL_JUDGE_USER_PROMPT = """
        conversation:
        {trajectory_str}
        
        expectedOutcomes:
        {nl_assertions}
        """  # noqa: W293
