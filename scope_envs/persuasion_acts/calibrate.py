"""Fits the shared reference behaviour of the act-level testbed on the annotated P4G dialogues.

    python -m scope_envs.persuasion_acts.calibrate --data PATH/TO/p4g [--out reference.json]

(needs the `calibrate` extra: scipy and openpyxl)

Reads `300_dialog.xlsx` (per-sentence act labels of 300 dialogues), `300_info.xlsx` (donations)
and `full_info.csv` (personas), turns every persuader turn and the persuadee turn answering it
into one event (the persuader's act, the features of the moment, the persuadee's reply act), and
fits the masked softmax regression of `model.py` by maximum likelihood with a small ridge (L-BFGS
to convergence: the objective is strictly convex). The result is the package's
`reference.json`; the testbed needs no data to run.

Label mapping: a turn's act is its most decisive label (an amount request, then a proposition,
then the first strategy, then greeting or closing); non-task labels (thanks, praise, off-task)
carry no act and the exchange is skipped. A persuadee turn's act is its most decisive label (an
amount, agreeing, refusing, a negative reaction, a question about the charity, a positive
reaction, else neutral); amounts are binned from the dialogue's actual donation. A decision that
answers no request counts as the reaction it expresses. Each dialogue is read up to the first
amount stated, where the testbed's episode ends.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scope_envs.core.sampling import log_softmax
from scope_envs.persuasion_acts.acts import (
    AGREE,
    AMOUNTS,
    ASK_ORG,
    DISAGREE,
    FIRST_AMOUNT,
    NEGATIVE,
    NEUTRAL,
    PERSUADEE_ACTS,
    PERSUADER_ACTS,
    POSITIVE,
    REQUESTS,
)
from scope_envs.persuasion_acts.model import (
    PERSONA_TRAITS,
    REFERENCE_PATH,
    USER_FEATURES,
    count_reactions,
    reply_mask,
    user_features,
)

PERSUADER_ALIASES = {
    "ask-donate-more": "ask-donation-amount",
    "confirm-donation": "ask-donation-amount",
    "non-personal-task-related-inquiry": "task-related-inquiry",
    "ask-not-donate-reason": "personal-related-inquiry",
}
PERSUADER_PRIORITY = ("ask-donation-amount", "proposition-of-donation")
PERSUADEE_LABELS = {
    "agree-donation": AGREE,
    "confirm-donation": AGREE,
    "disagree-donation": DISAGREE,
    "disagree-donation-more": DISAGREE,
    "negative-reaction-to-donation": NEGATIVE,
    "negative-to-inquiry": NEGATIVE,
    "ask-org-info": ASK_ORG,
    "ask-donation-procedure": ASK_ORG,
    "ask-persuader-donation-intention": ASK_ORG,
    "task-related-inquiry": ASK_ORG,
    "positive-reaction-to-donation": POSITIVE,
    "positive-to-inquiry": POSITIVE,
}
PERSUADEE_PRIORITY = (AGREE, DISAGREE, NEGATIVE, ASK_ORG, POSITIVE)
PERSONA_COLUMNS = ("extrovert.x", "agreeable.x", "conscientious.x", "neurotic.x", "open.x")
RIDGE = 1.0


def read_xlsx(path: Path) -> list[dict[str, object]]:
    from openpyxl import load_workbook

    sheet = load_workbook(path, read_only=True).active
    rows = sheet.iter_rows(values_only=True)
    header = [str(h) for h in next(rows)]
    return [dict(zip(header, row)) for row in rows]


def persuader_act(labels: list[str]) -> int | None:
    names = [PERSUADER_ALIASES.get(label, label) for label in labels]
    for name in PERSUADER_PRIORITY:
        if name in names:
            return PERSUADER_ACTS.index(name)
    known = [name for name in names if name in PERSUADER_ACTS]
    strategies = [name for name in known if name not in ("greeting", "closing")]
    chosen = strategies or known
    return PERSUADER_ACTS.index(chosen[0]) if chosen else None


def persuadee_act(labels: list[str], amount: float | None, answers_request: bool) -> int:
    if "provide-donation-amount" in labels and amount is not None:
        if not answers_request:
            return POSITIVE if amount > 0 else NEGATIVE
        if amount <= 0:
            return DISAGREE
        return FIRST_AMOUNT + int(np.searchsorted(AMOUNTS, min(amount, AMOUNTS[-1])))
    acts = {PERSUADEE_LABELS[label] for label in labels if label in PERSUADEE_LABELS}
    for act in PERSUADEE_PRIORITY:
        if act in acts:
            if act in (AGREE, DISAGREE) and not answers_request:
                return POSITIVE if act == AGREE else NEGATIVE
            return act
    return NEUTRAL


def read_personas(full_info: Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Persuadee personas (z-scored Big Five) by dialogue id, and their correlation matrix."""
    with full_info.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["B4"] == "1" and not r["B2"].startswith("BAD_")]
    raw = np.array([[float(r[c]) if r[c] else np.nan for c in PERSONA_COLUMNS] for r in rows])
    mean, std = np.nanmean(raw, axis=0), np.nanstd(raw, axis=0)
    z = np.nan_to_num((raw - mean) / std)
    complete = ~np.isnan(raw).any(axis=1)
    return {r["B2"]: z[i] for i, r in enumerate(rows)}, np.corrcoef(z[complete].T)


@dataclass(frozen=True)
class Event:
    """One persuader act answered by the persuadee, with the state of the dialogue before it."""

    act: int
    repeats: int  # earlier uses of the same act
    positive: int
    negative: int
    exchange: int
    requests: int  # earlier propositions and amount requests
    reply: int


def read_dialogues(data: Path) -> dict[str, list[Event]]:
    """Every annotated dialogue's events in order, read up to the first amount stated (where the
    testbed's episode ends), by dialogue id."""
    amounts = {}
    for row in read_xlsx(data / "300_info.xlsx"):
        if row["B4"] == 1 and row["B6"] is not None and 0 <= float(row["B6"]) <= 2:  # type: ignore[arg-type]
            amounts[str(row["B2"])] = float(row["B6"])  # type: ignore[arg-type]
    turns: dict[str, dict[tuple[int, int], list[str]]] = defaultdict(lambda: defaultdict(list))
    for row in read_xlsx(data / "300_dialog.xlsx"):
        role, turn = int(row["B4"]), int(row["Turn"])  # type: ignore[arg-type]
        columns = ("er_label_1", "er_label_2") if role == 0 else ("ee_label_1", "ee_label_2")
        labels = [str(row[c]).strip().lower() for c in columns if row[c] is not None and str(row[c]) != "nan"]
        turns[str(row["B2"])][(turn, role)].extend(labels)
    dialogues: dict[str, list[Event]] = {}
    for dialogue, labelled in sorted(turns.items()):
        counts = np.zeros(len(PERSUADER_ACTS), int)
        positive = negative = exchange = requests = 0
        events = dialogues[dialogue] = []
        for turn in sorted({t for t, _ in labelled}):
            act = persuader_act(labelled.get((turn, 0), []))
            if (turn, 1) not in labelled:
                continue
            reply_labels = labelled[(turn, 1)]
            if act is None:
                reply = persuadee_act(reply_labels, amounts.get(dialogue), False)
            else:
                reply = persuadee_act(reply_labels, amounts.get(dialogue), act in REQUESTS)
                events.append(Event(act, int(counts[act]), positive, negative, exchange, requests, reply))
                counts[act] += 1
                exchange += 1
                requests += act in REQUESTS
            up, down = count_reactions(np.array([reply]))
            positive, negative = positive + int(up[0]), negative + int(down[0])
            if reply >= FIRST_AMOUNT:
                break
    return dialogues


def read_events(data: Path, personas: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(features, reply, mask)` for every persuader act answered by the persuadee."""
    rows = []
    for dialogue, events in read_dialogues(data).items():
        persona = personas.get(dialogue, np.zeros(len(PERSONA_TRAITS)))
        for e in events:
            features = user_features(
                np.array([e.act]), np.array([e.repeats]), [e.positive], [e.negative], [e.exchange], persona[None]
            )[0]
            rows.append((features, e.reply))
    features = np.array([f for f, _ in rows])
    reply = np.array([r for _, r in rows])
    acts = features[:, : len(PERSUADER_ACTS)].argmax(axis=1)
    return features, reply, reply_mask(acts)


def objective(
    weights: np.ndarray, features: np.ndarray, reply: np.ndarray, mask: np.ndarray
) -> tuple[float, np.ndarray]:
    """The documented likelihood's objective and its gradient: the mean negative log-likelihood of
    the replies under the masked softmax `softmax(W x)`, plus the ridge `RIDGE / (2 n) * |W|^2`."""
    n = len(reply)
    logp = log_softmax(features @ weights.T, mask)
    onehot = np.eye(len(PERSUADEE_ACTS))[reply]
    value = -logp[np.arange(n), reply].mean() + RIDGE / (2 * n) * float((weights**2).sum())
    gradient = (np.where(mask, np.exp(logp), 0.0) - onehot).T @ features / n + RIDGE * weights / n
    return float(value), gradient


def fit(
    features: np.ndarray, reply: np.ndarray, mask: np.ndarray, *, tolerance: float = 1e-8
) -> tuple[np.ndarray, float]:
    """Minimises `objective` (strictly convex: one optimum) with L-BFGS until no gradient component
    exceeds `tolerance`; the weights and the mean log-likelihood they reach."""
    from scipy.optimize import minimize

    shape = (len(PERSUADEE_ACTS), features.shape[1])

    def flat(weights: np.ndarray) -> tuple[float, np.ndarray]:
        value, gradient = objective(weights.reshape(shape), features, reply, mask)
        return value, gradient.ravel()

    options = {"gtol": tolerance, "ftol": 0.0, "maxiter": 20_000}
    result = minimize(flat, np.zeros(shape).ravel(), jac=True, method="L-BFGS-B", options=options)
    weights = result.x.reshape(shape)
    largest = float(np.abs(objective(weights, features, reply, mask)[1]).max())
    if largest > 10 * tolerance:
        raise RuntimeError(f"calibration did not converge: gradient {largest:.2e} ({result.message})")
    logp = log_softmax(features @ weights.T, mask)
    return weights, float(logp[np.arange(len(reply)), reply].mean())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def calibrate(data: Path) -> dict[str, object]:
    personas, correlation = read_personas(data / "full_info.csv")
    features, reply, mask = read_events(data, personas)
    weights, log_likelihood = fit(features, reply, mask)
    counts = np.bincount(reply, minlength=len(PERSUADEE_ACTS))
    return {
        "persuader_acts": list(PERSUADER_ACTS),
        "persuadee_acts": list(PERSUADEE_ACTS),
        "user_features": list(USER_FEATURES),
        "weights": np.round(weights, 4).tolist(),
        "persona_traits": list(PERSONA_TRAITS),
        "persona_correlation": np.round(correlation, 4).tolist(),
        "meta": {
            "events": len(reply),
            "reply_counts": dict(zip(PERSUADEE_ACTS, counts.tolist())),
            "mean_log_likelihood": round(log_likelihood, 4),
            "uniform_log_likelihood": round(float(-np.log(mask.sum(axis=1)).mean()), 4),
            "ridge": RIDGE,
            "sources": {name: sha256(data / name) for name in ("300_dialog.xlsx", "300_info.xlsx", "full_info.csv")},
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder with the P4G raw files")
    parser.add_argument("--out", type=Path, default=REFERENCE_PATH)
    args = parser.parse_args(argv)
    table = calibrate(args.data)
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    meta = table["meta"]
    print(
        f"{meta['events']} events; mean log-likelihood {meta['mean_log_likelihood']} "  # type: ignore[index]
        f"(uniform {meta['uniform_log_likelihood']}); wrote {args.out}"  # type: ignore[index]
    )


if __name__ == "__main__":
    main()
