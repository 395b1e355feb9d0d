"""The human persuadees of the Persuasion for Good corpus, as reference data for simulator fidelity.

`human_reference(env, split=..., limit=...)` reads `full_dialog.csv` next to the corpus' `full_info.csv`
(the env must use corpus personas) and returns, for each dialogue of the split that has its
text, the persuadee's turns and actual donation (`full_info.csv`, column B6; $0-$2).

Dialogue acts: the corpus annotates acts on 300 dialogues only, and no trained act classifier
ships with SCOPE, so `persuadee_act` is a documented rule-based alternative. It labels a turn
with one of the coarse persuadee acts that the act-level testbed also uses (reactions, a question
about the charity, agreeing, refusing, stating an amount), the most decisive one first. Its
agreement with the human annotation of the 300 dialogues is measured by `annotation_agreement`
(docs/fidelity.md gives the number).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from scope_envs.core.agreement import TaggerQuality, tagger_quality
from scope_envs.core.dialogue import USER
from scope_envs.core.reference import HumanConversation, HumanReference
from scope_envs.p4g.donation import MAX_DONATION, parse_donation

DIALOG_FILE = "full_dialog.csv"
ANNOTATED_FILE = "300_dialog.xlsx"
ANNOTATED_INFO_FILE = "300_info.xlsx"
PERSUADEE_ROLE = "1"

ACTS = (
    "provide-amount",
    "agree-donation",
    "disagree-donation",
    "negative-reaction",
    "ask-org-info",
    "positive-reaction",
    "neutral-reaction",
)
# The corpus' persuadee labels (Wang et al. 2019) mapped onto the coarse acts; others are neutral.
ANNOTATION_TO_ACT = {
    "provide-donation-amount": "provide-amount",
    "agree-donation": "agree-donation",
    "confirm-donation": "agree-donation",
    "disagree-donation": "disagree-donation",
    "disagree-donation-more": "disagree-donation",
    "negative-reaction-to-donation": "negative-reaction",
    "negative-to-inquiry": "negative-reaction",
    "ask-org-info": "ask-org-info",
    "ask-donation-procedure": "ask-org-info",
    "ask-persuader-donation-intention": "ask-org-info",
    "task-related-inquiry": "ask-org-info",
    "positive-reaction-to-donation": "positive-reaction",
    "positive-to-inquiry": "positive-reaction",
}

_REFUSAL = re.compile(
    r"\b(?:no(?:pe)?\b|not (?:going|willing|interested|donat\w*|able|comfortable|today|right now|at this time)|"
    r"(?:don't|do not|won't|will not|can't|cannot|wouldn't|would not|rather not|prefer not)\b[^.?!]*"
    r"\b(?:donat\w*|give|giving|contribut\w*|afford|spare|part)|pass\b|keep (?:my|the) (?:money|payment))",
    re.IGNORECASE,
)
_AGREE = re.compile(
    r"\b(?:yes|yeah|yep|sure|ok(?:ay)?|alright|of course|absolutely|definitely|i(?:'ll| will| would|'d) "
    r"(?:like to |love to |be happy to |be glad to )?(?:donate|give|contribute)|i(?:'m| am) (?:in|willing))\b",
    re.IGNORECASE,
)
_NEGATIVE = re.compile(
    r"\b(?:not sure|don't (?:trust|believe|think|know)|skeptic\w*|doubt\w*|scam|suspicious|hesita\w*|"
    r"rather|tight|broke|bad|worr\w*|concern\w*|unfortunately|sadly|but)\b",
    re.IGNORECASE,
)
_POSITIVE = re.compile(
    r"\b(?:great|good|wonderful|nice|awesome|amazing|love|glad|happy|interesting|cool|agree|important|"
    r"heartbreaking|sad|terrible|horrible|awful|wow|thank\w*|definitely|true|right|helpful|worthy)\b",
    re.IGNORECASE,
)
_DONATION_WORDS = re.compile(r"\b(?:donat\w*|give|giving|contribut\w*|\$|cents?|dollars?)", re.IGNORECASE)


def persuadee_act(text: str) -> str:
    """The coarse act of a persuadee turn (see the module docstring); decisions before reactions."""
    amount = parse_donation(text)
    if amount is not None and amount > 0:
        return "provide-amount"
    talks_donation = bool(_DONATION_WORDS.search(text)) or amount == 0
    if talks_donation and _REFUSAL.search(text):
        return "disagree-donation"
    if talks_donation and _AGREE.search(text):
        return "agree-donation"
    if _NEGATIVE.search(text):
        return "negative-reaction"
    if "?" in text:
        return "ask-org-info"
    if _POSITIVE.search(text) or _AGREE.search(text):
        return "positive-reaction"
    return "neutral-reaction"


def join_turns(units: list[tuple[int, int, str]]) -> list[str]:
    """Sentences `(turn, order, text)` of one speaker joined into turns, in order: the corpus
    stores one row per sentence, a simulator speaks a turn at a time."""
    turns: dict[int, list[str]] = defaultdict(list)
    for turn, _, text in sorted(units):
        turns[turn].append(text)
    return [" ".join(texts) for _, texts in sorted(turns.items())]


def dialogue_turns(dialog_csv: Path, role: str = PERSUADEE_ROLE) -> dict[str, list[str]]:
    """Each dialogue's turns by one role (`"0"` persuader, `"1"` persuadee), in order."""
    units: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    with dialog_csv.open(newline="", encoding="utf-8") as handle:
        for row_number, row in enumerate(csv.DictReader(handle)):
            if str(row["B4"]).strip() == role:
                units[row["B2"].strip()].append((int(row["Turn"]), row_number, row["Unit"].strip()))
    return {dialogue: join_turns(items) for dialogue, items in units.items()}


def stated_donations(folder: Path) -> dict[str, float]:
    """The donation each annotated persuadee stated in the dialogue (`300_info.xlsx`, B5), by
    dialogue; empty without the file or openpyxl. Out-of-range amounts are left out."""
    path = folder / ANNOTATED_INFO_FILE
    try:
        from openpyxl import load_workbook
    except ImportError:
        return {}
    if not path.is_file():
        return {}
    rows = load_workbook(path, read_only=True).active.iter_rows(values_only=True)
    header = [str(h) for h in next(rows)]
    stated = {}
    for values in rows:
        row = dict(zip(header, values))
        if row["B4"] == 1 and isinstance(row["B5"], (int, float)) and 0 <= row["B5"] <= MAX_DONATION:
            stated[str(row["B2"]).strip()] = float(row["B5"])
    return stated


def corpus_folder(env: Any) -> Path:
    """The folder of the corpus the env's personas come from; an error for synthetic personas."""
    source = str(getattr(env, "persona_source", ""))
    if not source.startswith("corpus:"):
        raise ValueError(
            f"P4G human reference data needs corpus personas, not {source or 'unknown'} ones: "
            "make the env with persona_source=PATH/TO/p4g (or set $SCOPE_P4G_DATA)"
        )
    location = Path(source.removeprefix("corpus:"))
    folder = location.parent if location.is_file() else location
    if not (folder / DIALOG_FILE).is_file():
        raise ValueError(f"no {DIALOG_FILE} next to the personas in {folder}: the human persuadees' turns are there")
    return folder


def human_reference(env: Any, *, split: str = "test", limit: int | None = None) -> HumanReference:
    """The human persuadees of the env's `split` dialogues that have text (the first `limit`): their
    turns, the donation they stated where the corpus annotates it (the env's `donation` is the
    amount a simulator states), and the donation they actually made (`full_info.csv`, B6)."""
    folder = corpus_folder(env)
    turns = dialogue_turns(folder / DIALOG_FILE)
    stated = stated_donations(folder)
    pairs = {pair.dialogue_id: pair for pair in env.pairs}
    conversations = []
    for task_id in env.task_ids(split):
        if turns.get(task_id):
            actual = pairs[task_id].persuadee.donation
            conversations.append(HumanConversation(task_id, tuple(turns[task_id]), stated.get(task_id), actual))
        if limit is not None and len(conversations) >= limit:
            break
    if not conversations:
        raise ValueError(f"no {split} dialogue of {folder} has its text in {DIALOG_FILE}")
    quality = None
    if (folder / ANNOTATED_FILE).is_file():
        try:
            quality = annotation_agreement(folder).as_dict()
        except ImportError:
            quality = None
    return HumanReference(
        side=USER,
        conversations=tuple(conversations),
        outcome="donation",
        act_of=persuadee_act,
        source=(
            f"Persuasion for Good persuadees ({folder / DIALOG_FILE}; stated donations from {ANNOTATED_INFO_FILE}, "
            "actual ones from full_info.csv)"
        ),
        actual_outcome=None,  # the env records what a simulator states, not what it would pay
        act_quality=quality,
    )


def annotated_turns(folder: Path) -> list[tuple[str, str]]:
    """The persuadee turns of the 300 annotated dialogues (`300_dialog.xlsx`): each turn's text
    (its sentences joined) and its human act: the most decisive (first in `ACTS`) of its
    sentences' labels mapped by `ANNOTATION_TO_ACT`, as the tagger picks one act per turn. Needs openpyxl."""
    from openpyxl import load_workbook

    rows = load_workbook(folder / ANNOTATED_FILE, read_only=True).active.iter_rows(values_only=True)
    header = [str(h) for h in next(rows)]
    units: dict[tuple[str, int], list[tuple[int, str, str]]] = defaultdict(list)
    for order, values in enumerate(rows):
        row = dict(zip(header, values))
        if row["B4"] == 1 and row["ee_label_1"] and row["Unit"]:
            act = ANNOTATION_TO_ACT.get(str(row["ee_label_1"]).strip().lower(), "neutral-reaction")
            units[(str(row["B2"]), int(row["Turn"]))].append((order, str(row["Unit"]).strip(), act))
    turns = []
    for _, sentences in sorted(units.items()):
        sentences.sort()
        text = " ".join(unit for _, unit, _ in sentences)
        turns.append((text, min((act for _, _, act in sentences), key=ACTS.index)))
    return turns


def annotation_agreement(folder: Path) -> TaggerQuality:
    """`persuadee_act` against the corpus annotation at the unit it is applied to, a turn
    (`annotated_turns`): accuracy, majority baseline, Cohen's kappa, per-act F1 and its floor."""
    turns = annotated_turns(folder)
    return tagger_quality([act for _, act in turns], [persuadee_act(text) for text, _ in turns])
