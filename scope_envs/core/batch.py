"""Many dialogue episodes stepped from one thread, grouped by the side that is to speak.

LLM-bound training and evaluation want one batched `generate` call for every episode waiting
on the same side. `DialogueBatch` gives exactly that: `pending(side)` lists the views waiting on
`side`, the caller generates all replies at once, and `step(side, replies)` applies them.
`run_episodes` is the loop for the common case of one policy per side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scope_envs.core.dialogue import SIDES, DialogueEnv, Transition
from scope_envs.core.policy import MAX_SEED, ChatPolicy, PolicyError, resolve_policy, turn_seed


@dataclass(frozen=True)
class Pending:
    """One episode waiting on a side: the view to answer, its tools, and the seed to answer with."""

    index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    seed: int


@dataclass(frozen=True)
class EpisodeResult:
    index: int
    scenario_id: str
    rewards: dict[str, float]
    reward_info: dict[str, dict[str, Any]]
    end_reason: str
    terminated: bool
    turns: int
    messages: dict[str, list[dict[str, Any]]]  # each side's final view, OpenAI format
    transcript: str


class DialogueBatch:
    """Steps `envs` together; see the module docstring."""

    def __init__(self, envs: Sequence[DialogueEnv]) -> None:
        if not envs:
            raise ValueError("a batch needs at least one env")
        self.envs = list(envs)
        self.results: list[EpisodeResult | None] = [None] * len(self.envs)
        self._infos: list[dict[str, dict[str, Any]]] = [{} for _ in self.envs]
        self._episode_seeds = [0] * len(self.envs)

    def reset(
        self,
        seeds: Sequence[int | None] | int | None = None,
        options: Sequence[Mapping[str, Any] | None] | Mapping[str, Any] | None = None,
    ) -> None:
        n = len(self.envs)
        if seeds is None or isinstance(seeds, int):
            seed_list: list[int | None] = [None if seeds is None else seeds + i for i in range(n)]
        else:
            seed_list = list(seeds)
        option_list = list(options) if isinstance(options, Sequence) else [options] * n
        if len(seed_list) != n or len(option_list) != n:
            raise ValueError(f"expected {n} seeds and {n} options")
        for i, env in enumerate(self.envs):
            _, self._infos[i] = env.reset(seed=seed_list[i], options=dict(option_list[i] or {}))
            self._episode_seeds[i] = int(env.np_random.integers(MAX_SEED)) if seed_list[i] is None else seed_list[i]
            self.results[i] = None

    @property
    def done(self) -> bool:
        return all(result is not None for result in self.results)

    def pending(self, side: str) -> list[Pending]:
        """The live episodes whose turn it is for `side`, in index order."""
        waiting = []
        for i, env in enumerate(self.envs):
            if self.results[i] is None and env.end is None and env.to_speak == side:
                info = self._infos[i][side]
                waiting.append(
                    Pending(i, info["messages"], info["tools"], turn_seed(self._episode_seeds[i], len(env.log)))
                )
        return waiting

    def view(self, index: int, side: str) -> list[dict[str, Any]]:
        """Episode `index`'s current view of `side` (OpenAI dicts, as of the last step)."""
        return self._infos[index][side]["messages"]

    def step(self, side: str, replies: Mapping[int, Any]) -> None:
        """Applies `replies` (episode index -> action) of `side`; an episode not named is left waiting."""
        for i, reply in replies.items():
            env = self.envs[i]
            if env.end is not None or env.to_speak != side:
                raise ValueError(f"episode {i} is not waiting on {side!r}")
            self._record(i, env.step({side: reply}))

    def fail(self, index: int, error: str) -> None:
        """Ends episode `index` as a truncation because its policy could not reply."""
        self._record(index, self.envs[index].abort("policy_error", error))

    def _record(self, i: int, transition: Transition) -> None:
        _, rewards, _, _, infos = transition
        self._infos[i] = infos
        env = self.envs[i]
        if env.end is None:
            return
        self.results[i] = EpisodeResult(
            index=i,
            scenario_id=infos["agent"]["scenario_id"],
            rewards=dict(rewards),
            reward_info={side: infos[side]["reward_info"] for side in SIDES},
            end_reason=env.end.reason,
            terminated=env.end.terminated,
            turns=env.turns,
            messages={side: infos[side]["messages"] for side in SIDES},
            transcript=env.render() or "",
        )


def respond_all(policy: ChatPolicy, pending: Sequence[Pending]) -> dict[int, Any]:
    """Replies for every pending view, batched when the policy can batch.

    A `PolicyError` from a batched call is retried one view at a time, so a single bad reply
    only costs its own episode; the value for such an episode is the `PolicyError` itself.
    """
    batch_fn = getattr(policy, "respond_batch", None)
    if batch_fn is not None:
        try:
            replies = batch_fn(
                [p.messages for p in pending], [p.tools or None for p in pending], seeds=[p.seed for p in pending]
            )
            return {p.index: reply for p, reply in zip(pending, replies, strict=True)}
        except PolicyError:
            pass
    results: dict[int, Any] = {}
    for p in pending:
        try:
            results[p.index] = policy.respond(p.messages, p.tools or None, seed=p.seed)
        except PolicyError as error:
            results[p.index] = error
    return results


def run_episodes(
    envs: Sequence[DialogueEnv],
    policies: Mapping[str, Any],
    *,
    seeds: Sequence[int | None] | int | None = None,
    options: Sequence[Mapping[str, Any] | None] | Mapping[str, Any] | None = None,
    progress: bool = False,
) -> list[EpisodeResult]:
    """Plays one episode in each env to its end; `policies` maps each side to a policy or spec."""
    resolved = {side: resolve_policy(policies[side], env=envs[0], side=side) for side in SIDES}
    batch = DialogueBatch(envs)
    batch.reset(seeds, options)
    bar = _progress_bar(len(envs)) if progress else None
    finished = 0
    while not batch.done:
        for side in SIDES:
            pending = batch.pending(side)
            if not pending:
                continue
            replies = respond_all(resolved[side], pending)
            for index, reply in replies.items():
                if isinstance(reply, PolicyError):
                    batch.fail(index, str(reply))
                else:
                    batch.step(side, {index: reply})
        if bar is not None:
            now = sum(result is not None for result in batch.results)
            bar.update(now - finished)
            finished = now
    if bar is not None:
        bar.close()
    return [result for result in batch.results if result is not None]


def _progress_bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="episodes", unit="ep")
