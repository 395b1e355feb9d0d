"""tau2's reward, computed without rebuilding the environment for every episode.

tau2's evaluator (`evaluate_simulation` with `EvaluationType.ALL`) builds two fresh environments
per episode, replays the episode's tool calls into one and the task's gold actions into the
other, and compares SHA-256 hashes of the two full databases. Here:

* the gold end state of a task is computed once, by running the gold actions with tau2's own
  tools on a copy-on-write fork, and kept as the serialised records the gold actions touched;
* the episode's database is already its own fork, so only the records either side touched are
  serialised and compared. Two databases serialise (and so hash) equal exactly when every record
  does, and a record neither side touched is the base record on both sides.

The other components are tau2's own code (`CommunicateEvaluator`, `Action.compare_with_tool_call`,
`Environment.run_env_assertion`) on the episode's data. The reward is the product over the task's
reward basis, and 0 unless the episode ended by an agent or user stop, as in tau2.

The NL judge's failures are its own, never the episode's: where its verdict is scored, a judge that
cannot reply (an API error after its retries) or replies with no verdict raises `JudgeError`, which
the env turns into a failure outside the conversation (`policy_error`, never trained on); where it
is only reported, the report says why it is missing. A `FatalPolicyError` (a rejected key, an
unknown model) always propagates and stops the run.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scope_envs.core.policy import PolicyError
from scope_envs.tau2 import cow
from scope_envs.tau2.domain import Tau2Domain
from scope_envs.tau2.prompts import NL_JUDGE_SYSTEM_PROMPT, NL_JUDGE_USER_PROMPT

ENV_BASES = frozenset({"DB", "ENV_ASSERTION"})


class JudgeError(PolicyError):
    """The NL judge could not give a verdict that the reward scores: the episode failed outside its
    conversation, as when a player's API fails (`end_reason == "policy_error"`)."""


@dataclass(frozen=True)
class GoldState:
    """A task's gold end state: the serialised records its gold actions touched."""

    records: dict[tuple[str, str], str | None]
    other_fields: str
    failed_actions: tuple[str, ...] = ()


@dataclass
class Evaluation:
    """A reward, its components over the reward basis, and the details of every check."""

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


def gold_state(domain: Tau2Domain, task: Any) -> GoldState:
    """The gold end state of `task`, computed on first use and cached on the domain."""
    cached = domain._gold.get(task.id)
    if cached is not None:
        return cached
    db = domain.fork_db()
    environment = domain.environment(db)
    failed = []
    for action in task.evaluation_criteria.actions or []:
        try:  # tau2 logs a failing gold action and carries on
            environment.make_tool_call(
                tool_name=action.name, requestor=action.requestor, **copy.deepcopy(action.arguments)
            )
        except Exception as error:
            failed.append(f"{action.name}: {error}")
    state = GoldState(cow.changed_records(db), cow.other_fields_json(db), tuple(failed))
    with domain._lock:
        domain._gold.setdefault(task.id, state)
    return domain._gold[task.id]


def db_matches(domain: Tau2Domain, gold: GoldState, db: Any) -> bool:
    """Whether the fork `db` serialises exactly like the gold end state (tau2's DB hash check)."""
    if cow.other_fields_json(db) != gold.other_fields:
        return False
    touched = cow.touched(db)
    for table, keys in touched.items():
        current = getattr(db, table)
        for key in keys:
            expected = (
                gold.records[(table, key)] if (table, key) in gold.records else domain.base_record_json(table, key)
            )
            if cow.record_json(current.current(key)) != expected:
                return False
    for (table, key), expected in gold.records.items():
        if key not in touched.get(table, ()) and domain.base_record_json(table, key) != expected:
            return False
    return True


def reward_basis(task: Any) -> list[str]:
    criteria = task.evaluation_criteria
    return [] if criteria is None else [basis.value for basis in criteria.reward_basis]


def judged_in_reward(task: Any) -> bool:
    """Whether the task's reward needs an NL judge: NL assertions in its basis, and some to judge."""
    criteria = task.evaluation_criteria
    return criteria is not None and "NL_ASSERTION" in reward_basis(task) and bool(criteria.nl_assertions)


def evaluate(
    domain: Tau2Domain,
    task: Any,
    db: Any,
    *,
    stopped: bool,
    end_reason: str,
    agent_contents: Sequence[str | None],
    tool_calls: Sequence[Any],
    environment: Any,
    judge: Any = None,
    trajectory: Callable[[], list[Any]] | None = None,
) -> Evaluation:
    """tau2's `evaluate_simulation(..., EvaluationType.ALL)` (with NL assertions when a judge is given).

    `agent_contents` are the contents of the agent's messages (its first greeting included),
    `tool_calls` the tau2 `ToolCall`s the env executed, `environment` tau2's `Environment` on `db`
    (for env assertions), `trajectory` builds the tau2 messages an NL judge reads.
    """
    basis = reward_basis(task)
    details: dict[str, Any] = {"reward_basis": basis, "termination": end_reason}
    criteria = task.evaluation_criteria
    nl_assertions = list(criteria.nl_assertions or []) if criteria is not None else []
    if not stopped:
        details["note"] = f"Simulation terminated prematurely. Termination reason: {end_reason}"
        if nl_assertions:
            details["nl_assertions"] = _nl_not_evaluated(nl_assertions, "the episode did not end by a stop")
        return Evaluation(0.0, {}, details)
    if criteria is None:
        details["note"] = "No evaluation criteria"
        return Evaluation(1.0, {}, details)

    components: dict[str, float] = {}
    # Environment: the database check and the env assertions.
    if criteria.actions is None and criteria.env_assertions is None:
        db_reward, details["db_match"] = 1.0, True
    else:
        gold = gold_state(domain, task)
        details["db_match"] = db_matches(domain, gold, db)
        db_reward = 1.0 if details["db_match"] else 0.0
        if gold.failed_actions:
            details["gold_action_errors"] = list(gold.failed_actions)
    assertion_reward = 1.0
    if criteria.env_assertions:
        checks = []
        for assertion in criteria.env_assertions:
            met = environment.run_env_assertion(assertion, raise_assertion_error=False)
            checks.append({"func_name": assertion.func_name, "met": bool(met)})
            assertion_reward *= 1.0 if met else 0.0
        details["env_assertions"] = checks
    if "DB" in basis:
        components["DB"] = db_reward
    if "ENV_ASSERTION" in basis:
        components["ENV_ASSERTION"] = assertion_reward

    # Actions: every gold action among the executed tool calls.
    if "ACTION" in basis:
        gold_actions = criteria.actions or []
        matched = [any(action.compare_with_tool_call(call) for call in tool_calls) for action in gold_actions]
        details["action_checks"] = [
            {"action_id": action.action_id, "name": action.name, "met": met}
            for action, met in zip(gold_actions, matched)
        ]
        components["ACTION"] = 1.0 if all(matched) else 0.0

    # NL assertions: judged when a judge is supplied, reported as not evaluated otherwise. A basis
    # naming NL_ASSERTION with none to judge scores 1, as tau2's NLAssertionsEvaluator does.
    if "NL_ASSERTION" in basis and not nl_assertions:
        components["NL_ASSERTION"] = 1.0
        details["nl_assertions"] = {"evaluated": True, "assertions": [], "checks": [], "in_reward_basis": True}
    elif nl_assertions or "NL_ASSERTION" in basis:
        if judge is None:
            if "NL_ASSERTION" in basis:
                raise ValueError(f"task {task.id} has NL assertions in its reward basis: pass nl_judge=")
            details["nl_assertions"] = _nl_not_evaluated(nl_assertions, "no judge supplied (nl_judge=)")
        else:
            scored = "NL_ASSERTION" in basis
            try:
                nl_reward, details["nl_assertions"] = judge_nl_assertions(
                    judge, trajectory() if trajectory else [], task
                )
            except JudgeError as error:
                if scored:
                    raise
                details["nl_assertions"] = _nl_not_evaluated(nl_assertions, str(error))
            details["nl_assertions"]["in_reward_basis"] = scored
            if scored:
                components["NL_ASSERTION"] = nl_reward

    # Communication: tau2's substring check over the agent's messages.
    if "COMMUNICATE" in basis:
        components["COMMUNICATE"], details["communicate_checks"] = communicate_reward(task, agent_contents)

    reward = 1.0
    for value in components.values():
        reward *= value
    return Evaluation(reward, components, details)


def communicate_reward(task: Any, agent_contents: Sequence[str | None]) -> tuple[float, list[dict[str, Any]]]:
    """tau2's `CommunicateEvaluator` on the agent's messages."""
    from tau2.data_model.message import AssistantMessage
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    messages = [AssistantMessage(role="assistant", content=content) for content in agent_contents]
    info = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=messages)
    checks = [{"info": check.info, "met": check.met} for check in info.communicate_checks or []]
    return float(info.reward), checks


def _nl_not_evaluated(assertions: list[str], reason: str) -> dict[str, Any]:
    return {"evaluated": False, "reason": reason, "assertions": assertions}


def judge_nl_assertions(judge: Any, trajectory: list[Any], task: Any) -> tuple[float, dict[str, Any]]:
    """tau2's NL-assertion judgement, with `judge` (any chat policy) in place of tau2's fixed model;
    `JudgeError` when the judge cannot reply or its reply is not a verdict."""
    assertions = list(task.evaluation_criteria.nl_assertions or [])
    if not assertions:
        return 1.0, {"evaluated": True, "assertions": [], "checks": []}
    trajectory_str = "\n".join(f"{message.role}: {message.content}" for message in trajectory)
    prompt = NL_JUDGE_USER_PROMPT.format(trajectory_str=trajectory_str, nl_assertions=assertions)
    messages = [{"role": "system", "content": NL_JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    try:
        reply = judge.respond(messages, None)
    except PolicyError as error:
        raise JudgeError(f"tau2's NL judge could not reply: {error}") from error
    try:
        results = json.loads(_reply_text(reply)).get("results", [])
        checks = [
            {"assertion": r["expectedOutcome"], "met": bool(r["metExpectation"]), "justification": r["reasoning"]}
            for r in results
        ]
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise JudgeError(f"tau2's NL judge replied with no verdict: {type(error).__name__}: {error}") from None
    return (1.0 if all(check["met"] for check in checks) else 0.0), {
        "evaluated": True,
        "assertions": assertions,
        "checks": checks,
    }


def _reply_text(reply: Any) -> str:
    if isinstance(reply, str):
        return reply
    if hasattr(reply, "text"):
        return str(reply.text)
    if isinstance(reply, dict):
        return str(reply.get("content") or "")
    raise TypeError(f"the NL judge replied with a {type(reply).__name__}, not text")
