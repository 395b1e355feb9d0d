"""Checking this env's reward against tau2's own evaluator.

`reference_reward(env)` runs tau2's `evaluate_simulation` (`EvaluationType.ALL`, which rebuilds the
environment and replays every tool call) on the env's finished episode. `parity_cases(domain, task)`
derives deterministic trajectories from a task's gold actions: the gold run itself, an empty
conversation, a wrong item, a wrong argument, a missing step, an extra modification, the write
actions in reverse order, the right database without the required information communicated,
an agent stop, a transfer and a truncation. `play(env, task_id, case)` plays one into the env.
The parity tests and `benchmarks/tau2_speed.py` use them.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

from scope_envs.core.dialogue import AGENT, USER
from scope_envs.tau2.domain import Tau2Domain
from scope_envs.tau2.prompts import AGENT_STOP, TRANSFER_TOOL, USER_STOP
from scope_envs.tau2.reward import reward_basis

# How this env's end reasons map onto tau2's termination reasons (any other reason is not a stop).
TERMINATIONS = {
    "user_stop": "user_stop",
    "user_transfer": "user_stop",
    "user_out_of_scope": "user_stop",
    "agent_stop": "agent_stop",
    "agent_transfer": "agent_stop",
    "max_turns": "max_steps",
    "error_budget": "too_many_errors",
}
EXTRA_ADDRESS = {
    "address1": "1 Parity Lane",
    "address2": "",
    "city": "Testville",
    "state": "CA",
    "country": "USA",
    "zip": "00000",
}


@dataclass(frozen=True)
class ParityCase:
    """A trajectory to play: the agent's tool calls, its closing message and how the episode ends.

    `ending`: "user_stop", "agent_stop", "transfer", "truncated" or "empty" (the user stops at once).
    """

    name: str
    actions: tuple[tuple[str, str], ...]  # (tool name, JSON arguments)
    final_text: str
    ending: str = "user_stop"


def reference_reward(env: Any, judge_llm: str | None = None, **judge_args: Any) -> Any:
    """tau2's own `RewardInfo` for the env's finished episode (imports tau2's full evaluator).

    A task whose reward basis names NL assertions is evaluated as tau2's batch runner does
    (`EvaluationType.ALL_WITH_NL_ASSERTIONS`), by tau2's judge: its fixed model, or `judge_llm`
    (a litellm model name) called with `judge_args` (such as `api_base`) for this call only.
    """
    # tau2's evaluator imports litellm, which otherwise tries to download a model price list.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator import evaluator_nl_assertions as nl
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    if env.end is None:
        raise RuntimeError("reference_reward needs a finished episode")
    now = datetime.datetime.now().isoformat()
    termination = TERMINATIONS.get(env.end.reason, "agent_error")
    run = SimulationRun(
        id=str(uuid.uuid4()),
        task_id=env.task.id,
        start_time=now,
        end_time=now,
        duration=0.0,
        termination_reason=TerminationReason(termination),
        messages=env.tau2_messages(),
    )
    judged = "NL_ASSERTION" in reward_basis(env.task)
    evaluation = EvaluationType.ALL_WITH_NL_ASSERTIONS if judged else EvaluationType.ALL
    fixed = nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS
    if judge_llm is not None:
        nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS = judge_llm, {**fixed[1], **judge_args}
    try:
        return evaluate_simulation(run, env.task, evaluation, solo_mode=False, domain=env.domain.name)
    finally:
        nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS = fixed


def play(env: Any, task_id: str, case: ParityCase) -> tuple[float, dict[str, Any]]:
    """Plays `case` into `env` as task `task_id`; returns the agent's reward and reward info."""
    env.reset(options={"task_id": task_id})
    if case.ending == "empty":
        return _last(env.step({USER: f"Never mind, I will call back later. {USER_STOP}"}))
    result = env.step({USER: "Hi, I need help with my request."})
    for name, arguments in case.actions:
        if env.end is not None:
            break
        message = json.dumps({"name": name, "arguments": json.loads(arguments)})
        result = env.step({AGENT: message})
    if env.end is not None:
        return _last(result)
    if case.ending == "truncated":
        return _last(env.abort("max_turns", "a truncated copy of the trajectory"))
    if case.ending == "transfer":
        result = env.step({AGENT: json.dumps({"name": TRANSFER_TOOL, "arguments": {"summary": "parity check"}})})
        if env.end is not None:
            return _last(result)
    if case.ending == "agent_stop":
        return _last(env.step({AGENT: f"{case.final_text} {AGENT_STOP}"}))
    env.step({AGENT: case.final_text})
    return _last(env.step({USER: f"Thank you. {USER_STOP}"}))


def _last(transition: tuple) -> tuple[float, dict[str, Any]]:
    _, rewards, _, _, infos = transition
    return rewards[AGENT], infos[AGENT]["reward_info"]


def parity_cases(domain: Tau2Domain, task: Any) -> list[ParityCase]:
    """Deterministic variations of a task's gold trajectory (duplicates removed)."""
    criteria = task.evaluation_criteria
    gold = [(a.name, copy.deepcopy(a.arguments)) for a in (criteria.actions or [])] if criteria else []
    info = list(criteria.communicate_info or []) if criteria else []
    told = "Your request is complete." + (f" For your reference: {'; '.join(info)}." if info else "")
    silent = "Your request is complete."
    writes = [i for i, (name, _) in enumerate(gold) if domain.tool_types.get(name) == "write"]
    perturber = _Perturber(domain)

    variants: list[tuple[str, list[tuple[str, dict[str, Any]]], str, str]] = [
        ("gold", gold, told, "user_stop"),
        ("empty", [], silent, "empty"),
        ("not_communicated", gold, silent, "user_stop"),
        ("agent_stop", gold, told, "agent_stop"),
        ("transfer", [a for a in gold if a[0] != TRANSFER_TOOL], told, "transfer"),
        ("truncated", gold, told, "truncated"),
    ]
    if writes:
        first = writes[0]
        variants.append(("wrong_item", _replace(gold, first, perturber.wrong_item(*gold[first])), told, "user_stop"))
        variants.append(
            ("wrong_argument", _replace(gold, first, perturber.wrong_argument(*gold[first])), told, "user_stop")
        )
        variants.append(("missing_step", [a for i, a in enumerate(gold) if i != writes[-1]], told, "user_stop"))
        reads = [a for i, a in enumerate(gold) if i not in writes]
        variants.append(("wrong_order", reads + [gold[i] for i in reversed(writes)], told, "user_stop"))
    else:
        variants.append(("missing_step", gold[:-1], told, "user_stop"))
    extra = perturber.extra_modification(gold)
    if extra is not None:
        variants.append(("extra_modification", [*gold, extra], told, "user_stop"))

    cases, seen = [], set()
    for name, actions, final_text, ending in variants:
        encoded = tuple((tool, json.dumps(args, sort_keys=True)) for tool, args in actions)
        key = (encoded, final_text, ending)
        if key not in seen:
            seen.add(key)
            cases.append(ParityCase(name, encoded, final_text, ending))
    return cases


def _replace(actions: list, index: int, new: tuple[str, dict[str, Any]]) -> list:
    return [new if i == index else action for i, action in enumerate(actions)]


class _Perturber:
    """Domain-aware, deterministic edits of one tool call, reading the (never modified) base database."""

    def __init__(self, domain: Tau2Domain) -> None:
        self.domain = domain
        self.db = domain.base_db

    def _record(self, table: str, key: Any) -> Any:
        return dict.get(getattr(self.db, table, {}), key) if isinstance(key, str) else None

    def _user_of(self, arguments: dict[str, Any]) -> str | None:
        if isinstance(arguments.get("user_id"), str):
            return arguments["user_id"]
        for table, field in (("orders", "order_id"), ("reservations", "reservation_id")):
            record = self._record(table, arguments.get(field))
            if record is not None:
                return record.user_id
        return None

    def _other_payment(self, arguments: dict[str, Any], current: str) -> str | None:
        user = self._record("users", self._user_of(arguments))
        options = sorted(p for p in (user.payment_methods if user else {}) if p != current)
        return options[0] if options else None

    def wrong_item(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        args = copy.deepcopy(arguments)
        for field in ("new_item_ids", "item_ids"):
            if args.get(field):
                args[field][0] = self._sibling_item(args[field][0], args.get("order_id"), field == "item_ids")
                return name, args
        if args.get("flights"):
            flight = args["flights"][0]
            day = datetime.date.fromisoformat(flight["date"]) + datetime.timedelta(days=1)
            flight["date"] = day.isoformat()
            return name, args
        if args.get("passengers"):
            args["passengers"][0]["dob"] = "1990-01-01"
            return name, args
        return name, _tweak_first_id(args)

    def _sibling_item(self, item_id: str, order_id: Any, from_order: bool) -> str:
        order = self._record("orders", order_id)
        if from_order and order is not None:
            others = sorted({item.item_id for item in order.items} - {item_id})
            if others:
                return others[0]
        for product in getattr(self.db, "products", {}).values():
            if item_id in product.variants:
                others = sorted(v for v in product.variants if v != item_id and product.variants[v].available)
                if others:
                    return others[0]
        return item_id[:-1] + str((int(item_id[-1]) + 1) % 10) if item_id[-1:].isdigit() else item_id + "0"

    def wrong_argument(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        args = copy.deepcopy(arguments)
        if "reason" in args:
            args["reason"] = "ordered by mistake" if args["reason"] == "no longer needed" else "no longer needed"
        elif "cabin" in args:
            cabins = ["basic_economy", "economy", "business"]
            args["cabin"] = cabins[(cabins.index(args["cabin"]) + 1) % 3] if args["cabin"] in cabins else "economy"
        elif "insurance" in args:
            args["insurance"] = "no" if args["insurance"] == "yes" else "yes"
        elif "total_baggages" in args:
            args["total_baggages"] += 1
            args["nonfree_baggages"] = args.get("nonfree_baggages", 0) + 1
        elif "amount" in args and isinstance(args["amount"], (int, float)):
            args["amount"] += 1
        elif "zip" in args:
            args["zip"] = "99999"
        elif "payment_method_id" in args or "payment_id" in args:
            field = "payment_method_id" if "payment_method_id" in args else "payment_id"
            args[field] = self._other_payment(args, args[field]) or args[field] + "0"
        else:
            args = _tweak_first_id(args)
        return name, args

    def extra_modification(self, gold: list[tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]] | None:
        user_id = next((u for u in (self._user_of(args) for _, args in gold) if u), None)
        if user_id is None:
            return None
        if self.domain.name == "retail":
            return "modify_user_address", {"user_id": user_id, **EXTRA_ADDRESS}
        return "send_certificate", {"user_id": user_id, "amount": 100}


def _tweak_first_id(args: dict[str, Any]) -> dict[str, Any]:
    for key, value in args.items():
        if isinstance(value, str) and value[-1:].isdigit():
            args[key] = value[:-1] + str((int(value[-1]) + 1) % 10)
            return args
    return args
