"""Finding and reading the Persuasion for Good corpus.

Where personas come from, in order: a path given by the caller; the directory or file named by
`$SCOPE_P4G_DATA`; a copy downloaded earlier into the user cache; a download of `full_info.csv`
from the official repository into that cache (checked against its known SHA-256). Both the
official layout (`full_info.csv`) and ConvoKit's `persuasionforgood-corpus` directory are read.
`CORPUS` names the official files and their checksums; `fetch_corpus` (`python -m
scope_envs.p4g.fetch DIR`) downloads all of them, checked, into a folder for `$SCOPE_P4G_DATA`.
"""

from __future__ import annotations

import csv
import json
import os
import urllib.error
from pathlib import Path
from typing import Any

from scope_envs.core.data import DataSet, MissingDataError, fetch_files, read_url, sha256, user_cache
from scope_envs.core.files import atomic_write
from scope_envs.p4g.personas import PersonaPair, pairs_from_rows

ENV_VAR = "SCOPE_P4G_DATA"
REPOSITORY_URL = "https://gitlab.com/ucdavisnlp/persuasionforgood/-/raw/master/"
# Each file of a copy, and its path in the official repository.
UPSTREAM_PATHS = {
    "full_dialog.csv": "data/FullData/full_dialog.csv",
    "full_info.csv": "data/FullData/full_info.csv",
    "300_dialog.xlsx": "data/AnnotatedData/300_dialog.xlsx",
    "300_info.xlsx": "data/AnnotatedData/300_info.xlsx",
    "LICENSE": "LICENSE",
}
CORPUS = DataSet(
    title="the Persuasion for Good corpus",
    setting=ENV_VAR,
    home="gitlab.com/ucdavisnlp/persuasionforgood, Apache-2.0",
    checksums={
        "full_dialog.csv": "3ecaa3e9f0577170b91c3306d2439c910150cf010b76e7637ef3bab724075a9f",
        "full_info.csv": "93be6f62d41f4925e8be21534c23cd75444e1a5d5384abe13b15eda2b37838b4",
        "300_dialog.xlsx": "48e292ceb4b5574694e82581eb2a25883ce9ef75817193820dfe3c5621c62767",
        "300_info.xlsx": "5d07b790f7794cba6c1cb96f680ccb38053fac133077b613fa121c2588172f2f",
        "LICENSE": "3a6fae17894cb2907700bb95910241bd67f921e78d6f3c75ca347fb6bd204a46",
    },
    fetch_module="scope_envs.p4g.fetch",
)
URL_ENV_VAR = "SCOPE_P4G_URL"  # a mirror of the official data/FullData/ folder
OFFICIAL_URL = REPOSITORY_URL + "data/FullData/"
INFO_FILE = "full_info.csv"
INFO_SHA256 = CORPUS.checksums[INFO_FILE]


class CorpusNotFoundError(MissingDataError):
    """No Persuasion for Good corpus could be found or downloaded."""


def cache_dir() -> Path:
    return user_cache("p4g")


def fetch_corpus(folder: Path, repository_url: str = REPOSITORY_URL, *, timeout: float = 60.0) -> Path:
    """Downloads every file of `CORPUS` from the repository (or a mirror of its layout) into
    `folder`, kept only when all of them match their checksums."""
    base = repository_url.rstrip("/") + "/"
    return fetch_files(CORPUS, {name: base + path for name, path in UPSTREAM_PATHS.items()}, folder, timeout=timeout)


def locate_corpus(path: str | os.PathLike[str] | None = None, *, download: bool = True, timeout: float = 20.0) -> Path:
    """The corpus file or directory to read; raises `CorpusNotFoundError` naming every option."""
    tried = []
    candidates = [("the path argument", path), (f"${ENV_VAR}", os.environ.get(ENV_VAR)), ("the cache", cache_dir())]
    for label, candidate in candidates:
        if not candidate:
            continue
        found = _corpus_at(Path(candidate))
        if found is not None:
            return found
        tried.append(f"{label}: nothing readable at {candidate}")
        if label == "the path argument":  # an explicit path that is wrong is an error, not a fallback
            raise CorpusNotFoundError(
                f"no Persuasion for Good corpus at {candidate} ({INFO_FILE} or a ConvoKit corpus)"
            )
    if download:
        try:
            return download_corpus(timeout=timeout)
        except (OSError, urllib.error.URLError, ValueError) as error:
            tried.append(f"download: {error}")
    raise CorpusNotFoundError(
        "Persuasion for Good corpus not found. Pass its path (persona_source=PATH), set "
        f"${ENV_VAR} to a folder holding {INFO_FILE} (or ConvoKit's persuasionforgood-corpus; "
        f"`{CORPUS.fetch_command}` makes one), or go online once so that it is downloaded into "
        f"{cache_dir()}. Tried: " + "; ".join(tried)
    )


def _corpus_at(path: Path) -> Path | None:
    if path.is_file() and path.suffix == ".csv":
        return path
    if (path / INFO_FILE).is_file():
        return path / INFO_FILE
    if (path / "speakers.json").is_file() and (path / "utterances.jsonl").is_file():
        return path
    return None


def download_corpus(*, timeout: float = 20.0) -> Path:
    """Downloads `full_info.csv` once into the cache, atomically, and checks its SHA-256."""
    url = os.environ.get(URL_ENV_VAR, OFFICIAL_URL).rstrip("/") + "/" + INFO_FILE
    payload = read_url(url, timeout)
    digest = sha256(payload)
    if digest != INFO_SHA256:
        raise ValueError(f"{url} has SHA-256 {digest}, not the known {INFO_SHA256}; point ${ENV_VAR} at a copy instead")
    target = cache_dir() / INFO_FILE
    atomic_write(target, payload)
    return target


def read_pairs(location: Path, *, include_flagged: bool = False) -> list[PersonaPair]:
    """Persona pairs from `full_info.csv` or a ConvoKit corpus directory."""
    if location.is_dir():
        return pairs_from_rows(_convokit_rows(location), include_flagged=include_flagged, column_suffix="")
    with location.open(newline="", encoding="utf-8") as handle:
        return pairs_from_rows(csv.DictReader(handle), include_flagged=include_flagged)


def _meta(entry: Any) -> dict[str, Any]:
    """ConvoKit stores an object either as its metadata or as `{"meta": {...}, ...}`."""
    if isinstance(entry, dict) and isinstance(entry.get("meta"), dict):
        return entry["meta"]
    return entry if isinstance(entry, dict) else {}


ROLE_CODES = {"0": 0, "er": 0, "persuader": 0, "1": 1, "ee": 1, "persuadee": 1}


def _convokit_rows(directory: Path) -> list[dict[str, Any]]:
    speakers = {sid: _meta(entry) for sid, entry in json.loads((directory / "speakers.json").read_text()).items()}
    conversations_file = directory / "conversations.json"
    conversations = json.loads(conversations_file.read_text()) if conversations_file.is_file() else {}
    roles: dict[tuple[str, int], str] = {}
    with (directory / "utterances.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            utterance = json.loads(line)
            code = ROLE_CODES.get(str(utterance.get("meta", {}).get("role", "")).strip().lower())
            if code is not None:
                roles.setdefault((str(utterance["conversation_id"]), code), str(utterance["speaker"]))
    rows = []
    for (conversation_id, code), speaker in roles.items():
        meta = _meta(conversations.get(conversation_id, {}))
        donation = meta.get("donation_er" if code == 0 else "donation_ee")
        rows.append({"B2": conversation_id, "B3": speaker, "B4": code, "B6": donation, **speakers.get(speaker, {})})
    return rows
