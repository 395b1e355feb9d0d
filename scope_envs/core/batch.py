"""Many dialogue episodes stepped from one thread, grouped by the side that is to speak.

LLM-bound training and evaluation want one batched `generate` call for every episode waiting
on the same side. `DialogueBatch` gives exactly that: `pending(side)` lists the views waiting on
`side`, the caller generates all replies at once, and `step(side, replies)` applies them.
`play(player_of)` is the one loop that does this until every episode has ended, for any
assignment of players to episodes, and the trainer's rollouts (`scope_envs.core.rollout`) use it
with one set of players per group.

`scope_envs.core.episodes.run_episodes` is the common case, one policy per side, played either
with `play` or per episode (`scope_envs.core.async_rollout`, which builds on this module).

A player that keeps trajectories (`TracedPolicy`, e.g. a language model being trained) generates
token-in, token-out: it starts a `Trace` per episode and side, which builds each prompt from the
previous one plus what happened since, and records what was generated (`batch.traces`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from scope_envs.core.dialogue import SIDES, DialogueEnv, Transition
from scope_envs.core.policy import ChatPolicy, PolicyError, reply_or_error
from scope_envs.core.seeding import MAX_SEED, derive_seed


@dataclass(frozen=True)
class Pending:
    """One episode waiting on a side: the view to answer, its tools, and the seed to answer with."""

    index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    seed: int


class Trace(Protocol):
    """One side of one episode, token-in, token-out (see `baselines.training.traces.SideTrace`)."""

    def next_prompt(self, view: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[int]: ...

    def record(self, token_ids: Sequence[int], logprobs: Sequence[float], view_length_after: int) -> None: ...

    def samples(self) -> list[Any]: ...


@runtime_checkable
class TracedPolicy(Protocol):
    """A player whose turns are generated from token ids and kept as training samples."""

    def start_trace(self) -> Trace: ...

    def generate(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Any]: ...


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
        self.traces: list[dict[str, Trace]] = [{} for _ in self.envs]  # of `TracedPolicy` players
        self.generated_tokens = [0] * len(self.envs)
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
            env.reset(seed=seed_list[i], options=dict(option_list[i] or {}))
            self._infos[i] = env.chat_infos
            self._episode_seeds[i] = int(env.np_random.integers(MAX_SEED)) if seed_list[i] is None else seed_list[i]
            self.results[i] = None
            self.traces[i] = {}
            self.generated_tokens[i] = 0

    @property
    def done(self) -> bool:
        return all(result is not None for result in self.results)

    def pending(self, side: str) -> list[Pending]:
        """The live episodes whose turn it is for `side`, in index order."""
        return [
            waiting
            for i, env in enumerate(self.envs)
            if env.to_speak == side and (waiting := self.waiting(i)) is not None
        ]

    def waiting(self, index: int) -> Pending | None:
        """Episode `index`'s view waiting on the side to speak (`envs[index].to_speak`), or None once it ended."""
        env = self.envs[index]
        if self.results[index] is not None or env.end is not None:
            return None
        info = self._infos[index][env.to_speak]
        return Pending(index, info["messages"], info["tools"], derive_seed(self._episode_seeds[index], len(env.log)))

    def view(self, index: int, side: str) -> list[dict[str, Any]]:
        """Episode `index`'s current view of `side` (OpenAI dicts, as of the last step)."""
        return self._infos[index][side]["messages"]

    def step(self, side: str, replies: Mapping[int, Any]) -> None:
        """Applies `replies` (episode index -> what `side`'s policy produced) with
        `DialogueEnv.take_turn`: a `PolicyError` fails its episode; an episode not named is left waiting."""
        for i, reply in replies.items():
            env = self.envs[i]
            if env.end is not None or env.to_speak != side:
                raise ValueError(f"episode {i} is not waiting on {side!r}")
            self._record(i, env.take_turn(side, reply))

    def play(
        self,
        player_of: Callable[[int, str], Any],
        *,
        before_turn: Callable[[], None] | None = None,
        after_round: Callable[[], None] | None = None,
    ) -> None:
        """Plays every episode to its end: `player_of(index, side)` is the policy of `side` in
        episode `index`; each player answers all its waiting episodes in one batched call.
        `before_turn` is called before each such call, `after_round` after each round of sides."""
        while not self.done:
            for side in SIDES:
                by_player: dict[int, tuple[Any, list[Pending]]] = {}
                for pending in self.pending(side):
                    player = player_of(pending.index, side)
                    by_player.setdefault(id(player), (player, []))[1].append(pending)
                for player, waiting in by_player.values():
                    if before_turn is not None:
                        before_turn()
                    if isinstance(player, TracedPolicy):
                        self._generate(player, side, waiting)
                    else:
                        self.step(side, respond_all(player, waiting))
            if after_round is not None:
                after_round()

    def _generate(self, policy: TracedPolicy, side: str, waiting: list[Pending]) -> None:
        """One token-in, token-out turn of `policy` in every waiting episode."""
        prompts = self.trace_prompts(policy, side, waiting)
        self.record_generated(side, waiting, policy.generate(prompts, [p.seed for p in waiting]))

    def trace_prompts(self, policy: TracedPolicy, side: str, waiting: Sequence[Pending]) -> list[list[int]]:
        """The token-in prompt of `side`'s next turn in each waiting episode, from its `policy`'s trace."""
        for pending in waiting:
            self.traces[pending.index].setdefault(side, policy.start_trace())
        return [self.traces[p.index][side].next_prompt(p.messages, p.tools) for p in waiting]

    def record_generated(self, side: str, waiting: Sequence[Pending], replies: Sequence[Any]) -> None:
        """Applies the replies generated from `trace_prompts` and records them in the traces."""
        for pending, reply in zip(waiting, replies, strict=True):
            # The trace has seen the view up to and including this reply; tool results the env
            # appends while stepping are new to the model and go into its next prompt.
            seen = len(pending.messages) + 1
            self.step(side, {pending.index: reply})
            if isinstance(reply, PolicyError):  # no turn was generated (e.g. the context is full)
                continue
            self.traces[pending.index][side].record(reply.token_ids or [], reply.logprobs or [], seen)
            self.generated_tokens[pending.index] += len(reply.token_ids or [])

    def fail(self, index: int, error: str) -> None:
        """Ends episode `index` as a truncation because its policy could not reply."""
        env = self.envs[index]
        self._record(index, env.take_turn(env.to_speak, PolicyError(error)))

    def _record(self, i: int, transition: Transition) -> None:
        rewards = transition[1]
        env = self.envs[i]
        self._infos[i] = infos = env.chat_infos
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


def play_turn(env: DialogueEnv, side: str, policy: Any, seed: int | None) -> Transition:
    """One turn of `side` on `env`, played by `policy` from `side`'s current view and tools
    (`env.chat_infos`): the policy's reply, or the episode's failure when the policy could not reply."""
    info = env.chat_infos[side]
    return env.take_turn(side, reply_or_error(policy, info["messages"], info["tools"], seed))


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
    return {p.index: reply_or_error(policy, p.messages, p.tools, p.seed) for p in pending}
