"""SCOPE dialogue envs as TRL `GRPOTrainer` environments: the model plays the agent side, a SCOPE
simulator spec plays the user, the env scores the episode.

    from trl import GRPOConfig, GRPOTrainer
    from baselines.integrations.trl_env import environment_factory, task_dataset

    trainer = GRPOTrainer(  # ENV: a registered env name
        model=..., args=GRPOConfig(...), train_dataset=task_dataset(ENV, 64),
        environment_factory=environment_factory(ENV, simulator="openai:gpt-5-mini"),
    )

TRL (tested: `trl>=1.16,<1.17`, its `environment_factory` API) makes one environment per rollout,
calls `reset(**row)` with each dataset row and appends what it returns to the row's prompt, offers
the environment's public methods as tools, and calls `get_reward()` when the rollout ends. Here:

* `reset` starts the episode the row names (`task_id`, `seed`; else the env draws one from
  `split`) and returns the agent's view so far: its system prompt and any opening user turns;
* `say(message)` is the agent's turn: the message goes to the user, whose simulator replies
  (through the env's agent view, `scope_envs.core.views.AgentView`); the reply is the tool's result;
* `use_tool(name, arguments)`, offered only where the env gives the agent tools (a customer-service
  domain's tools), is a tool call of the agent, executed by the env;
* `get_reward()` is the agent's terminal reward; a rollout that stops before the conversation
  ends is ended as a truncation (`rollout_ended`) and scored by the env's own rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from scope_envs.core.dialogue import AGENT
from scope_envs.core.render import render_message
from scope_envs.core.views import AgentView

ENDED = "[The conversation is over.]"


class ScopeChat:
    """One SCOPE episode as a TRL environment; see the module docstring."""

    def __init__(self, env: str, simulator: Any = None, *, split: str = "train", **env_kwargs: Any) -> None:
        self.view = AgentView(env, simulator, **env_kwargs)
        self.split = split
        self.reward: float | None = None

    @property
    def dialogue(self) -> Any:
        return self.view.dialogue

    def reset(self, **row: Any) -> str:
        options = {"split": row.get("split") or self.split}
        if row.get("task_id"):
            options["task_id"] = row["task_id"]
        seed = row.get("seed")
        self.view.reset(seed=None if seed is None else int(seed), options=options)
        self.reward, self._seen = None, 1
        return "\n\n" + self._new_messages(include_system=True)

    def say(self, message: str) -> str:
        """Say something to the person you are talking with, and hear their reply.

        Args:
            message: What you say to them.

        Returns:
            Their reply, or a note that the conversation is over.
        """
        return self._act(message)

    def get_reward(self) -> float:
        if self.reward is None:
            if self.dialogue.end is None:
                self.dialogue.abort("rollout_ended", "the trainer's rollout ended before the conversation")
            self.reward = float(self.dialogue.chat_infos[AGENT]["reward_info"]["reward"])
        return self.reward

    def _act(self, action: Any) -> str:
        if self.dialogue.end is not None:
            return ENDED
        self.view.step(action)
        reply = self._new_messages()
        return reply + ("\n" + ENDED if self.dialogue.end is not None else "")

    def _new_messages(self, include_system: bool = False) -> str:
        """What the agent's view gained since it last looked (its own turns left out)."""
        view = self.dialogue.views[AGENT]
        start = 0 if include_system else self._seen
        self._seen = len(view)
        return "\n".join(render_message(m) for m in view[start:] if m.role != "assistant" or include_system)


class ScopeChatWithTools(ScopeChat):
    """`ScopeChat` for envs that give the agent tools: `use_tool` too."""

    def reset(self, **row: Any) -> str:
        observation = super().reset(**row)
        tools = json.dumps(self.dialogue.chat_infos[AGENT]["tools"], ensure_ascii=False)
        return f"{observation}\n\nTools you can call with use_tool: {tools}"

    def use_tool(self, name: str, arguments: str) -> str:
        """Call one of the service's tools listed in the conversation.

        Args:
            name: The tool's name.
            arguments: The tool's arguments, as a JSON object.

        Returns:
            The tool's result, or its error.
        """
        if not isinstance(arguments, str):  # a model may write the object itself
            arguments = json.dumps(arguments, ensure_ascii=False)
        return self._act(json.dumps({"name": name, "arguments": arguments or "{}"}, ensure_ascii=False))


def environment_factory(env: str, simulator: Any = None, **kwargs: Any) -> Callable[[], ScopeChat]:
    """What `GRPOTrainer(environment_factory=...)` takes: a new `ScopeChat` (with `use_tool` where
    the env gives the agent tools) on `env` (a registered name), `simulator` (a spec) as the user."""
    probe = ScopeChat(env, simulator, **kwargs)
    probe.reset(seed=0)
    cls = ScopeChatWithTools if probe.dialogue.chat_infos[AGENT]["tools"] else ScopeChat
    probe.dialogue.close()
    return lambda: cls(env, simulator, **kwargs)


def task_dataset(
    env: str, size: int, *, split: str = "train", instruction: str | None = None, **env_kwargs: Any
) -> Any:
    """A `datasets.Dataset` of `size` rows for `GRPOTrainer`: a conversational prompt and the
    scenario (`task_id`, cycling over the env's tasks of `split`) each rollout resets to."""
    from datasets import Dataset

    from scope_envs.core.views import build_env

    dialogue = build_env(env, **env_kwargs)
    ids = dialogue.task_ids(split) if hasattr(dialogue, "task_ids") else [None]
    dialogue.close()
    text = instruction or "You are the agent in this conversation; speak with the say tool."
    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": text}],
                "task_id": ids[i % len(ids)] or "",
                "split": split,
                "seed": i,
            }
            for i in range(size)
        ]
    )
