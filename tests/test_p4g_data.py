import csv
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st
from local_data import mirror as local_mirror
from local_data import serving

from scope_envs.core.data import MissingDataError
from scope_envs.p4g import fetch
from scope_envs.p4g.corpus import (
    CORPUS,
    INFO_SHA256,
    UPSTREAM_PATHS,
    CorpusNotFoundError,
    download_corpus,
    fetch_corpus,
    locate_corpus,
    read_pairs,
)
from scope_envs.p4g.env import load_persona_pairs
from scope_envs.p4g.personas import (
    ALL_TRAITS,
    Persona,
    parse_persona_block,
    split_of,
    synthetic_pairs,
    synthetic_traits,
)


def test_counts_match_the_source_figures(p4g_dir):
    """SOURCE.md: 2,034 rows of 1,017 dialogues, 27 flagged BAD_, 35 persuadee donations above $2."""
    info = p4g_dir / "full_info.csv"
    assert hashlib.sha256(info.read_bytes()).hexdigest() == INFO_SHA256
    everything = read_pairs(info, include_flagged=True)
    assert len(everything) == 1017 and 2 * len(everything) == 2034
    assert sum(p.dialogue_id.startswith("BAD_") for p in everything) == 27
    with info.open(newline="") as handle:
        raw = [row for row in csv.DictReader(handle) if row["B4"] == "1" and float(row["B6"]) > 2]
    assert len(raw) == 35
    unknown = {(p.dialogue_id, p.persuadee.persona_id) for p in everything if p.persuadee.donation is None}
    assert {(row["B2"], row["B3"]) for row in raw} <= unknown  # out-of-range donations are unknown, not clipped
    known = [p.persuadee.donation for p in everything if p.persuadee.donation is not None]
    assert sum(known) / len(known) == pytest.approx(0.352, abs=0.001)
    assert sum(d > 0 for d in known) / len(known) == pytest.approx(0.519, abs=0.001)
    default = read_pairs(info)
    assert len(default) == 990 and not any(p.dialogue_id.startswith("BAD_") for p in default)


def test_missing_cells_are_left_out(p4g_dir):
    pairs = read_pairs(p4g_dir / "full_info.csv", include_flagged=True)
    personas = [persona for p in pairs for persona in (p.persuader, p.persuadee)]
    # 15 rows have empty cells (7 without any score, 14 without demographics); one has an age of 3
    assert sum(len(p.traits) < len(ALL_TRAITS) for p in personas) == 16
    empty = next(p for p in personas if not p.traits)
    assert empty.render() == "<persona>\n(no survey answers)\n</persona>"
    assert all(18 <= p.traits["age"] <= 100 for p in personas if "age" in p.traits)  # the age of 3 is dropped


def test_split_is_by_dialogue_and_stable(p4g_dir):
    pairs = read_pairs(p4g_dir / "full_info.csv")
    test = [p for p in pairs if p.split == "test"]
    assert len(test) == 207  # a regression guard: the split is a function of the id alone
    assert split_of("20180904-045349_715_live") == "train" and split_of(test[0].dialogue_id) == "test"
    assert all(p.persuader.dialogue_id == p.persuadee.dialogue_id == p.dialogue_id for p in pairs)


def test_convokit_layout(p4g_dir, tmp_path):
    """ConvoKit's persuasionforgood-corpus: speaker meta without '.x', donations on conversations."""
    with (p4g_dir / "full_info.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if not r["B2"].startswith("BAD_")][:20]
    speakers = {
        r["B3"]: {"meta": {k.removesuffix(".x"): v for k, v in r.items() if k.endswith(".x")}, "vectors": []}
        for r in rows
    }
    conversations = {}
    with (tmp_path / "utterances.jsonl").open("w") as handle:
        for i, r in enumerate(rows):
            conversations.setdefault(r["B2"], {"meta": {}, "vectors": []})["meta"][
                "donation_ee" if r["B4"] == "1" else "donation_er"
            ] = float(r["B6"])
            utterance = {
                "id": str(i),
                "speaker": r["B3"],
                "conversation_id": r["B2"],
                "reply_to": None,
                "text": "hi",
                "meta": {"role": int(r["B4"])},
            }
            handle.write(json.dumps(utterance) + "\n")
    (tmp_path / "speakers.json").write_text(json.dumps(speakers))
    (tmp_path / "conversations.json").write_text(json.dumps(conversations))
    from_convokit = {p.dialogue_id: p for p in read_pairs(locate_corpus(tmp_path))}
    from_csv = {p.dialogue_id: p for p in read_pairs(p4g_dir / "full_info.csv") if p.dialogue_id in from_convokit}
    assert len(from_convokit) == 10 and from_convokit == from_csv


def test_synthetic_personas_are_said_once_in_one_line_without_going_online():
    """With the defaults and no corpus: no download is tried, no warning with a source line, and
    one line, once per process, says where personas come from and how to get the corpus."""
    code = (
        "import gymnasium as gym, urllib.request\n"
        "def offline(*a, **k): raise AssertionError('went online')\n"
        "urllib.request.urlopen = offline\n"
        "for _ in range(3): gym.make('scope_envs:scope/P4G-v0').reset(seed=0)\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "SCOPE_P4G_DATA"}
    with tempfile.TemporaryDirectory() as cache:
        environment["XDG_CACHE_HOME"] = cache
        done = subprocess.run(
            [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=environment
        )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("P4G: synthetic personas"), done.stderr
    assert "SCOPE_P4G_DATA" in lines[0] and "persona_source=PATH" in lines[0] and "download=True" in lines[0]


def test_not_found_names_every_option(no_corpus):
    with pytest.raises(CorpusNotFoundError) as raised:
        locate_corpus()
    message = str(raised.value)
    assert "SCOPE_P4G_DATA" in message and "persona_source" in message and "downloaded into" in message
    assert "download:" in message  # what was tried, and why it failed
    with pytest.raises(CorpusNotFoundError, match="no Persuasion for Good corpus at"):
        locate_corpus("/nonexistent/folder")


def test_env_var_and_synthetic_fallback(p4g_dir, no_corpus, monkeypatch):
    pairs, source = load_persona_pairs("auto")
    assert source == "synthetic" and len(pairs) == 1000
    with pytest.raises(CorpusNotFoundError):
        load_persona_pairs("corpus")
    monkeypatch.setenv("SCOPE_P4G_DATA", str(p4g_dir))
    pairs, source = load_persona_pairs("auto")
    assert source == f"corpus:{p4g_dir / 'full_info.csv'}" and len(pairs) == 990


@pytest.fixture
def mirror(p4g_dir):
    """A real HTTP server on loopback serving the corpus folder, as the official repository would."""
    with serving(p4g_dir) as url:
        yield url


def test_download_into_the_cache_once(no_corpus, mirror, monkeypatch, tmp_path):
    monkeypatch.setenv("SCOPE_P4G_URL", mirror)
    path = locate_corpus()
    assert path == tmp_path / "cache" / "scope" / "p4g" / "full_info.csv"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == INFO_SHA256
    monkeypatch.setenv("SCOPE_P4G_URL", "http://127.0.0.1:9/")  # offline again: the cached copy is used
    assert locate_corpus() == path


def test_download_rejects_a_changed_file(no_corpus, mirror, monkeypatch, tmp_path):
    monkeypatch.setenv("SCOPE_P4G_URL", mirror + "nonexistent/")
    with pytest.raises(OSError):
        download_corpus()
    with serving(local_mirror({"full_info.csv": b"B2,B3,B4\n"}, tmp_path / "served")) as url:
        monkeypatch.setenv("SCOPE_P4G_URL", url)
        with pytest.raises(ValueError, match="not the known"):
            download_corpus()
    assert not (tmp_path / "cache" / "scope" / "p4g" / "full_info.csv").exists()


def repository(files: dict, root):
    """A folder laid out as the official repository (`data/FullData/...`, `data/AnnotatedData/...`)."""
    return local_mirror({UPSTREAM_PATHS[name]: source for name, source in files.items()}, root)


def test_the_local_copy_is_the_official_files(p4g_dir, capsys):
    assert CORPUS.problems(p4g_dir) == []
    assert fetch.main(["--check", str(p4g_dir)]) == 0
    assert f"export SCOPE_P4G_DATA={p4g_dir.resolve()}" in capsys.readouterr().out


def test_fetch_writes_every_file_checked(p4g_dir, tmp_path, capsys):
    official = repository({name: p4g_dir / name for name in UPSTREAM_PATHS}, tmp_path / "persuasionforgood")
    with serving(official) as url:
        assert fetch.main([str(tmp_path / "over-http"), "--url", url]) == 0
    assert sorted(path.name for path in (tmp_path / "over-http").iterdir()) == sorted(UPSTREAM_PATHS)
    fetch_corpus(tmp_path / "from-a-folder", official.as_uri())  # a file:// mirror, as a mounted copy would be
    assert CORPUS.problems(tmp_path / "from-a-folder") == []
    assert "the 5 files of the Persuasion for Good corpus match" in capsys.readouterr().out


def test_fetch_keeps_nothing_when_a_file_is_not_the_official_one(tmp_path, capsys):
    """No corpus needed: whatever is served here differs from the official files."""
    served = repository(dict.fromkeys(UPSTREAM_PATHS, b"changed"), tmp_path / "persuasionforgood")
    with serving(served) as url:
        with pytest.raises(MissingDataError, match=r"is not the official full_dialog\.csv") as raised:
            fetch_corpus(tmp_path / "copy", url)
        assert fetch.main([str(tmp_path / "copy"), "--url", url]) == 1
    assert not (tmp_path / "copy").exists()
    message = str(raised.value)
    assert "\n" not in message and "SCOPE_P4G_DATA" in message and "gitlab.com/ucdavisnlp/persuasionforgood" in message
    assert "Apache-2.0" in capsys.readouterr().err
    assert fetch.main(["--check", str(tmp_path)]) == 1


def test_synthetic_personas_are_fixed_and_plausible():
    first, again = synthetic_pairs(50), synthetic_pairs(50)
    assert first == again
    assert len({p.split for p in synthetic_pairs()}) == 2
    import numpy as np

    rng = np.random.default_rng(0)
    sample = [synthetic_traits(rng) for _ in range(2000)]
    assert np.mean([t["agreeableness"] for t in sample]) == pytest.approx(3.92, abs=0.08)
    assert np.mean([t["sex"] == "Female" for t in sample]) == pytest.approx(0.509, abs=0.04)
    assert all(1 <= t["care"] <= 6 and 18 <= t["age"] <= 80 for t in sample)


@given(st.integers(0, 10_000))
def test_persona_block_round_trips(seed):
    import numpy as np

    traits = synthetic_traits(np.random.default_rng(seed))
    block = Persona("p", "persuadee", traits).render()
    assert parse_persona_block(f"You are ...\n\n{block}") == pytest.approx(traits)
