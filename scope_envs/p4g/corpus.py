"""Finding and reading the Persuasion for Good corpus.

Where personas come from, in order: a path given by the caller; the directory or file named by
`$SCOPE_P4G_DATA`; a copy downloaded earlier into the user cache; a download of `full_info.csv`
from the official repository into that cache (checked against its known SHA-256). Both the
official layout (`full_info.csv`) and ConvoKit's `persuasionforgood-corpus` directory are read.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from scope_envs.p4g.personas import PersonaPair, pairs_from_rows

ENV_VAR = "SCOPE_P4G_DATA"
URL_ENV_VAR = "SCOPE_P4G_URL"  # a mirror of the official data/FullData/ folder
OFFICIAL_URL = "https://gitlab.com/ucdavisnlp/persuasionforgood/-/raw/master/data/FullData/"
INFO_FILE = "full_info.csv"
INFO_SHA256 = "93be6f62d41f4925e8be21534c23cd75444e1a5d5384abe13b15eda2b37838b4"


class CorpusNotFoundError(FileNotFoundError):
    """No Persuasion for Good corpus could be found or downloaded."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "scope" / "p4g"


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
        f"${ENV_VAR} to a folder holding {INFO_FILE} (or ConvoKit's persuasionforgood-corpus), or go "
        f"online once so that it is downloaded into {cache_dir()}. Tried: " + "; ".join(tried)
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
    target = cache_dir() / INFO_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        payload = response.read()
    digest = hashlib.sha256(payload).hexdigest()
    if digest != INFO_SHA256:
        raise ValueError(f"{url} has SHA-256 {digest}, not the known {INFO_SHA256}; point ${ENV_VAR} at a copy instead")
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as handle:
        handle.write(payload)
    os.replace(handle.name, target)
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
