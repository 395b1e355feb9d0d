"""Reading a donation out of what the persuadee said.

The persuadee is told that a donation only counts when stated as `[DONATE $N]` or `[GIVE $N]`.
Those markers are read first: when a message holds one, the last marker is the message's
donation. Otherwise a fallback reads plain commitments ("I'll donate $0.50", "fifty cents",
"a dollar", "half", "all of it"), clause by clause, skipping refusals ("I won't donate $1") and
amounts that describe something else ("I only earned $2"). The last statement counts, and every
amount is clipped to the $0-$2 payment.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

MAX_DONATION = 2.0

_MARKER = re.compile(r"\[\s*(?:DONATE|GIVE)\s*\$?\s*(\d+(?:\.\d*)?|\.\d+)\s*\]", re.IGNORECASE)

_UNITS = {
    "zero": 0, "no": 0, "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000}
_WORD = r"(?:" + "|".join(sorted([*_UNITS, *_TENS, *_SCALES], key=len, reverse=True)) + r")"
_WORDS = rf"{_WORD}(?:[\s-]+{_WORD})*"
_NUMBER = r"(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)"
_NOT_MONEY = r"(?:years?|kids|children|people|percent|%|million|billion|times|minutes|hours|days)"

_AMOUNT = re.compile(
    rf"""
    \$\s*(?P<dollar_sign>{_NUMBER})(?:\s*(?P<sign_cents>cents?))?      # $1, $0.50, $.05, "$0.30 cents"
    | (?P<number>{_NUMBER})\s*(?:\$|(?P<unit>dollars?|dlrs?|dl\b|bucks?|usd|cents?|c\b|¢))  # 1 dollar, 50 cents, 100$
    | (?P<percent>{_NUMBER})\s*(?:%|percent\b)
    | \b(?P<words>{_WORDS})\s+(?P<word_unit>dollars?|bucks?|cents?)\b   # fifty cents, a dollar
    | \b(?P<coin>(?:a|one)\s+(?:quarter|dime|nickel|penny))\b
    | \b(?P<half>half)\b
    | \b(?P<whole>all\s+of\s+(?:it|that|my\s+\w+|the\s+\w+)|everything|all\s+\$?2|all\s+two\s+dollars
        |every\s+(?:penny|cent)|the\s+(?:entire|whole|full)\s+(?:\$?2|amount|payment|thing|bonus)|my\s+(?:entire|whole|full)\s+\w+)\b
    | (?<![\w.$])(?P<bare>{_NUMBER})(?![\w%]|\.\d|\s*{_NOT_MONEY}\b)
    | \b(?P<bare_words>{_WORDS})\b
    """,
    re.IGNORECASE | re.VERBOSE,
)
_COINS = {"quarter": 0.25, "dime": 0.10, "nickel": 0.05, "penny": 0.01}
# Giving words: "half", "everything" and percentages only count a few words after one of these
# (or when they are of the payment), so "a half hour" or "86% of donations" are not donations.
_GIVING = re.compile(
    r"\b(?:donat\w*|give|giving|contribut\w*|spare|pledge|offer|part\s+with|lock\s+into|agree\s+to|go\s+with)\b"
    r"(?:\W+\w+){0,3}?\W*$",
    re.IGNORECASE,
)
_DO = re.compile(r"\b(?:do|pay)\b(?:\W+\w+){0,2}?\W*$", re.IGNORECASE)  # "I'll do half", "pay half"
_OF_PAYMENT = re.compile(
    r"\s*(?:of\s+)?(?:(?:my|the|this|that|our|what|whatever)\s+)?(?:\w+\s+)?(?:payment|pay|bonus|earnings|amount|money|hit|it)\b",
    re.IGNORECASE,
)
# "make a donation of $2" and "make a $10 donation" are giving, although "make" alone is not.
_MAKE_DONATION = re.compile(
    r"\bmak(?:e|ing)\s+(?:a|an|my)\s+(?:one[- ]time\s+)?(?:(\S+)\s+)?donation(?:\s+(?:of|for))?", re.I
)

# A negation governing a giving verb: "I won't donate", "I can't give", "not going to contribute".
_REFUSAL = re.compile(
    r"\b(?:won'?t|will\s+not|can'?t|cannot|can\s+not|don'?t|do\s+not|not|never|wouldn'?t|would\s+not|refuse|rather\s+not|no\s+way)"
    r"(?:\W+\w+){0,4}?\W+(?:donat\w*|give|giving|contribut\w*|pay|spare|afford|part\s+with|pledge)\b",
    re.IGNORECASE,
)
# Words that make an amount describe something other than a donation, shortly before it.
_NOT_A_DONATION = re.compile(
    r"\b(?:earn\w*|paid|pay(?:s|ment)?\s+(?:is|was|of)|make|made|get|got|receive\w*|bonus|only\s+have|have\s+only|"
    r"cost\w*|price|worth|spent|spend|raised|million|billion|(?:per|a|every|each)\s+(?:month|year|week))\b(?:\W+\w+){0,4}?\W*$",
    re.IGNORECASE,
)
# A bare number ("How about 15?") only counts right after a word of giving or proposing.
_BARE_CUE = re.compile(
    r"\b(?:donat\w*|give|giving|contribut\w*|do|agree\s+to|about|around|how\s+about|what\s+about|confirm|spare|offer|"
    r"pledge|maybe|perhaps|only|at\s+least)\s*$",
    re.IGNORECASE,
)
_CLAUSES = re.compile(r"(?<!\d)[.!?;](?!\d)|\bbut\b|\bhowever\b|\binstead\b|\n", re.IGNORECASE)
# The cue patterns above read at most a few words before an amount; they are searched in this many
# characters before it (cut at a space), so that parsing stays linear in the length of a message.
LOOKBEHIND = 200


def _recent(clause: str, end: int) -> str:
    """The text before position `end` that a cue can reach: the last `LOOKBEHIND` characters,
    starting at a word boundary."""
    start = end - LOOKBEHIND
    if start <= 0:
        return clause[:end]
    space = clause.find(" ", start, end)
    return clause[space if space >= 0 else start : end]


def _words_value(text: str) -> float | None:
    total, current = 0, 0
    for word in re.split(r"[\s-]+", text.lower()):
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word in _SCALES:
            current = max(current, 1) * _SCALES[word]
            if word == "thousand":
                total, current = total + current, 0
        else:
            return None
    return float(total + current)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _amount_value(match: re.Match[str], clause: str) -> float | None:
    groups = match.groupdict()
    before, after = _recent(clause, match.start()), clause[match.end() :]
    if groups["dollar_sign"]:
        value = _number(groups["dollar_sign"])
        return value / 100 if groups["sign_cents"] and value >= 1 else value
    if groups["number"]:
        value = _number(groups["number"])
        unit = (groups["unit"] or "$").lower()
        is_cents = unit.startswith("c") or unit == "¢"
        return value / 100 if is_cents and value >= 1 else value  # ".30 cents" means $0.30
    if groups["percent"]:
        if not (_GIVING.search(before) or _OF_PAYMENT.match(after)):
            return None
        return _number(groups["percent"]) / 100 * MAX_DONATION
    if groups["words"]:
        value = _words_value(groups["words"])
        if value is None:
            return None
        return value / 100 if groups["word_unit"].lower().startswith("cent") else value
    if groups["coin"]:
        return _COINS[groups["coin"].split()[-1].lower()]
    if groups["half"] or groups["whole"]:
        cue = _GIVING.search(before) or (groups["half"] and (_DO.search(before) or _OF_PAYMENT.match(after)))
        if not (cue or (groups["whole"] and "$" in groups["whole"])):
            return None
        return MAX_DONATION / 2 if groups["half"] else MAX_DONATION
    if groups["bare"]:
        text = groups["bare"]
        if text.startswith((".", "0.")):  # ".60", "0.05": only money reads like that here
            return _number(text)
        if not _BARE_CUE.search(before):
            return None
        return _bare_value(_number(text))
    if groups["bare_words"]:
        value = _words_value(groups["bare_words"])
        if value is None or value < 10 or not _BARE_CUE.search(before):
            return None
        return _bare_value(value)
    return None


def _bare_value(value: float) -> float:
    """A number without a unit: "do 1" is dollars, "how about 15" cents of the $2, "a thousand" dollars."""
    return value if value <= MAX_DONATION or value >= 100 else value / 100


def _clause_donation(clause: str) -> float | None:
    clause = _MAKE_DONATION.sub(lambda m: f"donate {m.group(1) or ''}", clause)
    if _REFUSAL.search(clause):
        return None
    for match in _AMOUNT.finditer(clause):
        if _NOT_A_DONATION.search(_recent(clause, match.start())):
            continue
        value = _amount_value(match, clause)
        if value is not None:
            return value
    return None


@functools.lru_cache(maxsize=1 << 14)  # pure; every turn re-reads the conversation's earlier messages
def parse_donation(text: str) -> float | None:
    """The donation stated in one message, in dollars clipped to [0, 2], or None if none is stated."""
    markers = _MARKER.findall(text)
    if markers:
        return clip(float(markers[-1]))
    stated = [value for clause in _CLAUSES.split(text) if clause and (value := _clause_donation(clause)) is not None]
    return clip(stated[-1]) if stated else None


def final_donation(messages: Iterable[str]) -> float | None:
    """The last donation stated over a conversation's persuadee messages."""
    last = None
    for message in messages:
        value = parse_donation(message)
        if value is not None:
            last = value
    return last


def clip(value: float) -> float:
    return float(min(max(value, 0.0), MAX_DONATION))
