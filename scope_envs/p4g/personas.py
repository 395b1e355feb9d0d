"""Persuasion for Good personas: the participants' pre-task survey, from the corpus or synthetic.

A persona carries demographics, Big Five (1-5), moral foundations (1-6), Schwartz values (1-6)
and decision style (1-5), as in the corpus' `full_info.csv` (Wang et al., ACL 2019). A scenario
pairs the persuader and the persuadee of one dialogue.

Splits are by dialogue and depend only on the dialogue id (a SHA-256 bucket), so they are the
same in every version and on every machine: 20% of dialogues are `test`, the rest `train`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TEST_FRACTION = 0.2
PERSUADER, PERSUADEE = "persuader", "persuadee"


@dataclass(frozen=True)
class Trait:
    name: str  # our field name
    column: str  # the column in full_info.csv (ConvoKit drops the ".x")
    label: str  # how the persona block names it


DEMOGRAPHICS = (
    Trait("age", "age.x", "Age"),
    Trait("sex", "sex.x", "Sex"),
    Trait("race", "race.x", "Race"),
    Trait("education", "edu.x", "Education"),
    Trait("marital", "marital.x", "Marital status"),
    Trait("employment", "employment.x", "Employment"),
    Trait("income", "income.x", "Income bracket (1-12)"),
    Trait("religion", "religion.x", "Religion"),
    Trait("ideology", "ideology.x", "Political ideology"),
)
BIG_FIVE = (
    Trait("extraversion", "extrovert.x", "extraversion"),
    Trait("agreeableness", "agreeable.x", "agreeableness"),
    Trait("conscientiousness", "conscientious.x", "conscientiousness"),
    Trait("neuroticism", "neurotic.x", "neuroticism"),
    Trait("openness", "open.x", "openness"),
)
MORAL_FOUNDATIONS = tuple(Trait(n, f"{n}.x", n) for n in ("care", "fairness", "loyalty", "authority", "purity"))
SCHWARTZ_VALUES = tuple(
    Trait(n, f"{n}.x", n.replace("_", "-"))
    for n in (
        "freedom",
        "conform",
        "tradition",
        "benevolence",
        "universalism",
        "self_direction",
        "stimulation",
        "hedonism",
        "achievement",
        "power",
        "security",
    )
)
DECISION_STYLE = (Trait("rational", "rational.x", "rational"), Trait("intuitive", "intuitive.x", "intuitive"))
SCALES = (
    ("Big Five (1-5)", BIG_FIVE),
    ("Moral foundations (1-6)", MORAL_FOUNDATIONS),
    ("Schwartz values (1-6)", SCHWARTZ_VALUES),
    ("Decision style (1-5)", DECISION_STYLE),
)
ALL_TRAITS = DEMOGRAPHICS + BIG_FIVE + MORAL_FOUNDATIONS + SCHWARTZ_VALUES + DECISION_STYLE
CATEGORICAL = frozenset({"sex", "race", "education", "marital", "employment", "religion", "ideology"})


@dataclass(frozen=True)
class Persona:
    """One participant. `traits` maps field names to values; a missing survey cell is absent."""

    persona_id: str
    role: str
    traits: Mapping[str, float | str] = field(default_factory=dict)
    dialogue_id: str | None = None
    donation: float | None = None  # the corpus' actual donation (persuadees), None when unknown

    def render(self) -> str:
        """The `<persona>` block of a system prompt."""
        lines = []
        demographics = [f"{t.label}: {_fmt(self.traits[t.name])}" for t in DEMOGRAPHICS if t.name in self.traits]
        if demographics:
            lines.append("; ".join(demographics))
        for title, traits in SCALES:
            scores = [f"{t.label} {_fmt(self.traits[t.name])}" for t in traits if t.name in self.traits]
            if scores:
                lines.append(f"{title}: {', '.join(scores)}")
        return "<persona>\n" + ("\n".join(lines) or "(no survey answers)") + "\n</persona>"


def parse_persona_block(text: str) -> dict[str, float | str]:
    """The traits written in a `<persona>` block (the inverse of `Persona.render`); {} if there is none."""
    return dict(_persona_block_traits(text))


@functools.lru_cache(maxsize=1 << 12)  # a scripted persuadee reads its own system prompt every turn
def _persona_block_traits(text: str) -> tuple[tuple[str, float | str], ...]:
    start, end = text.find("<persona>"), text.find("</persona>")
    if start < 0 or end < start:
        return ()
    by_label = {t.label: t for t in DEMOGRAPHICS}
    by_scale = {title: {t.label: t for t in traits} for title, traits in SCALES}
    traits: dict[str, float | str] = {}
    for line in text[start + len("<persona>") : end].strip().splitlines():
        title, _, rest = line.partition(": ")
        if title in by_scale:
            for item in rest.split(", "):
                label, _, value = item.rpartition(" ")
                if label in by_scale[title]:
                    traits[by_scale[title][label].name] = float(value)
            continue
        for item in line.split("; "):
            label, _, value = item.partition(": ")
            if label in by_label:
                name = by_label[label].name
                traits[name] = value if name in CATEGORICAL else float(value)
    return tuple(traits.items())


@dataclass(frozen=True)
class PersonaPair:
    """A scenario: the two participants of one dialogue."""

    dialogue_id: str
    persuader: Persona
    persuadee: Persona

    @property
    def split(self) -> str:
        return split_of(self.dialogue_id)


@functools.lru_cache(maxsize=1 << 16)  # every env built asks for every id's split
def split_of(dialogue_id: str) -> str:
    """`"test"` for a stable 20% of dialogue ids, else `"train"`."""
    bucket = int.from_bytes(hashlib.sha256(dialogue_id.encode("utf-8")).digest()[:8], "big") / 2**64
    return "test" if bucket < TEST_FRACTION else "train"


def _fmt(value: float | str) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def traits_from_record(record: Mapping[str, Any], *, column_suffix: str = ".x") -> dict[str, float | str]:
    """Survey fields of one corpus row (`full_info.csv` columns, or ConvoKit speaker meta without `.x`).

    Missing cells (empty, NaN) are left out; an age outside 18-100 (the corpus has one of 3) is
    treated as missing.
    """
    traits: dict[str, float | str] = {}
    for trait in ALL_TRAITS:
        key = trait.column if column_suffix else trait.column.removesuffix(".x")
        raw = record.get(key)
        if raw is None or (isinstance(raw, str) and raw.strip() in {"", "NA", "nan", "NaN"}):
            continue
        if trait.name in CATEGORICAL:
            traits[trait.name] = str(raw).strip()
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        if np.isnan(value) or (trait.name == "age" and not 18 <= value <= 100):
            continue
        traits[trait.name] = value
    return traits


def pairs_from_rows(
    rows: Iterable[Mapping[str, Any]], *, include_flagged: bool = False, column_suffix: str = ".x"
) -> list[PersonaPair]:
    """Persona pairs from `full_info.csv` rows (columns B2 dialogue id, B3 user id, B4 role 0/1, B6 donation).

    Dialogues whose id starts with `BAD_` (flagged in the corpus) are left out unless
    `include_flagged`; a donation outside $0-$2 (typos up to 700 in the corpus) is unknown.
    """
    by_dialogue: dict[str, dict[int, Persona]] = {}
    for row in rows:
        dialogue_id = str(row["B2"]).strip()
        if dialogue_id.startswith("BAD_") and not include_flagged:
            continue
        role_code = int(float(row["B4"]))
        by_dialogue.setdefault(dialogue_id, {})[role_code] = Persona(
            persona_id=str(row.get("B3") or f"{dialogue_id}-{role_code}"),
            role=PERSUADER if role_code == 0 else PERSUADEE,
            traits=traits_from_record(row, column_suffix=column_suffix),
            dialogue_id=dialogue_id,
            donation=_donation(row.get("B6")),
        )
    return [
        PersonaPair(dialogue_id, roles[0], roles[1])
        for dialogue_id, roles in sorted(by_dialogue.items())
        if 0 in roles and 1 in roles
    ]


def _donation(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if 0.0 <= value <= 2.0 else None


# Synthetic personas: marginals measured on full_info.csv (2,034 rows), rounded. Categorical
# fields follow the corpus' category frequencies; scores are normal with the corpus' mean and
# standard deviation, clipped to the scale and rounded to the corpus' 0.2 steps; age is normal
# (mean 37, sd 11) clipped to 18-80; income is the corpus' bracket frequency. Fields are drawn
# independently of each other.
SYNTHETIC_CATEGORIES: dict[str, dict[str, float]] = {
    "sex": {"Female": 0.509, "Male": 0.488, "Other": 0.003},
    "race": {"White": 0.765, "Other": 0.235},
    "education": {"Less than four-year college": 0.512, "Four-year college": 0.362, "Postgraduate": 0.126},
    "marital": {"Unmarried": 0.509, "Married": 0.491},
    "employment": {"Employed for wages": 0.649, "Other": 0.351},
    "religion": {"Other religion": 0.404, "Protestant": 0.262, "Catholic": 0.191, "Atheist": 0.143},
    "ideology": {"Liberal": 0.415, "Conservative": 0.293, "Moderate": 0.292},
}
SYNTHETIC_INCOME = {1: 139, 2: 198, 3: 261, 4: 221, 5: 236, 6: 237, 7: 120, 8: 130, 9: 117, 10: 112, 11: 184, 12: 65}
SYNTHETIC_SCORES: dict[str, tuple[float, float, float]] = {  # name: (mean, sd, scale max)
    "extraversion": (3.23, 0.91, 5),
    "agreeableness": (3.92, 0.87, 5),
    "conscientiousness": (3.91, 0.72, 5),
    "neuroticism": (2.59, 0.97, 5),
    "openness": (3.69, 0.69, 5),
    "care": (4.53, 0.92, 6),
    "fairness": (4.78, 0.90, 6),
    "loyalty": (3.40, 1.16, 6),
    "authority": (3.78, 1.14, 6),
    "purity": (3.48, 1.46, 6),
    "freedom": (4.42, 1.13, 6),
    "conform": (3.83, 1.49, 6),
    "tradition": (3.48, 1.53, 6),
    "benevolence": (4.45, 1.42, 6),
    "universalism": (4.50, 1.50, 6),
    "self_direction": (4.48, 1.39, 6),
    "stimulation": (3.79, 1.47, 6),
    "hedonism": (3.54, 1.37, 6),
    "achievement": (3.66, 1.44, 6),
    "power": (3.64, 1.41, 6),
    "security": (4.26, 1.41, 6),
    "rational": (4.10, 0.75, 5),
    "intuitive": (3.14, 1.02, 5),
}
SYNTHETIC_SEED = 20190601  # fixed, so synthetic dialogue ids always name the same personas
SYNTHETIC_COUNT = 1000


def synthetic_traits(rng: np.random.Generator) -> dict[str, float | str]:
    traits: dict[str, float | str] = {"age": float(np.clip(round(rng.normal(37, 11)), 18, 80))}
    for name, weights in SYNTHETIC_CATEGORIES.items():
        labels = list(weights)
        p = np.array(list(weights.values()))
        traits[name] = str(labels[int(rng.choice(len(labels), p=p / p.sum()))])
    brackets = np.array(list(SYNTHETIC_INCOME.values()), dtype=float)
    traits["income"] = float(list(SYNTHETIC_INCOME)[int(rng.choice(len(brackets), p=brackets / brackets.sum()))])
    for name, (mean, sd, top) in SYNTHETIC_SCORES.items():
        traits[name] = float(np.clip(np.round(rng.normal(mean, sd) * 5) / 5, 1.0, top))
    return {t.name: traits[t.name] for t in ALL_TRAITS}  # the corpus' field order


def synthetic_pairs(count: int = SYNTHETIC_COUNT, seed: int = SYNTHETIC_SEED) -> list[PersonaPair]:
    rng = np.random.default_rng(seed)
    pairs = []
    for index in range(count):
        dialogue_id = f"synthetic-{index:05d}"
        persuader = Persona(f"{dialogue_id}-er", PERSUADER, synthetic_traits(rng), dialogue_id)
        persuadee = Persona(f"{dialogue_id}-ee", PERSUADEE, synthetic_traits(rng), dialogue_id)
        pairs.append(PersonaPair(dialogue_id, persuader, persuadee))
    return pairs
