"""τ³-bench's task files are never shipped: read from $SCOPE_TAU3_DATA, else fetched once from
tau2-bench at v1.0.0 into the user cache, and always checked against their git blob ids. The
fetch runs against a real HTTP server on loopback laid out as the repository at that tag."""

import pytest
from local_data import mirror, serving

from scope_envs.core.data import MissingDataError, git_blob_id
from scope_envs.tau2 import fetch, tau3

OFFICIAL = {"retail_tasks.json": "e95a9f898b2d1f6568ea8faec78edc3767ce747d"}  # `git hash-object`, at v1.0.0


@pytest.fixture
def nothing_local(tmp_path, monkeypatch):
    """No $SCOPE_TAU3_DATA, an empty cache, and the official home unreachable."""
    monkeypatch.delenv("SCOPE_TAU3_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SCOPE_TAU3_URL", "http://127.0.0.1:9/")  # the discard port: connection refused
    return tmp_path / "cache" / "scope" / "tau3" / "v1.0.0"


def repository(files: dict, root):
    """A folder laid out as tau2-bench at the tag: `data/tau2/domains/<domain>/tasks.json`."""
    return mirror({tau3.UPSTREAM_PATHS[name]: source for name, source in files.items()}, root)


def test_the_git_blob_id_is_git_hash_object():
    assert git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert tau3.TASKS.checksums["retail_tasks.json"] == OFFICIAL["retail_tasks.json"]


def test_the_files_are_read_from_the_setting(tau3_dir, monkeypatch):
    monkeypatch.setenv("SCOPE_TAU3_DATA", str(tau3_dir))
    monkeypatch.setenv("SCOPE_TAU3_URL", "http://127.0.0.1:9/")  # nothing is fetched
    assert tau3.task_file("retail") == tau3_dir / "retail_tasks.json"
    assert git_blob_id(tau3.task_file("airline").read_bytes()) == tau3.TASKS.checksums["airline_tasks.json"]
    assert fetch.main(["--check", str(tau3_dir)]) == 0


def test_a_copy_that_is_not_the_official_one_is_refused(tmp_path, monkeypatch):
    (tmp_path / "retail_tasks.json").write_text("[]")
    monkeypatch.setenv("SCOPE_TAU3_DATA", str(tmp_path))
    with pytest.raises(MissingDataError, match=r"retail_tasks\.json is not the official file") as raised:
        tau3.task_file("retail")
    assert f"SCOPE_TAU3_DATA={tmp_path}" in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(MissingDataError, match=r"airline_tasks\.json is missing"):
        tau3.task_file("airline")


def test_fetched_once_into_the_cache_and_checked(tau3_dir, nothing_local, tmp_path, monkeypatch):
    files = {name: tau3_dir / name for name in tau3.UPSTREAM_PATHS}
    with serving(repository(files, tmp_path / "tau2-bench")) as url:
        monkeypatch.setenv("SCOPE_TAU3_URL", url)
        assert tau3.task_file("retail") == nothing_local / "retail_tasks.json"
    assert tau3.TASKS.problems(nothing_local) == []  # both files, checked
    monkeypatch.setenv("SCOPE_TAU3_URL", "http://127.0.0.1:9/")  # offline again: the cached copy is used
    assert tau3.task_file("airline") == nothing_local / "airline_tasks.json"


def test_a_changed_file_is_refused_and_nothing_is_kept(nothing_local, tmp_path, monkeypatch):
    files = {name: b'[{"id": "0"}]' for name in tau3.UPSTREAM_PATHS}
    with serving(repository(files, tmp_path / "tau2-bench")) as url:
        monkeypatch.setenv("SCOPE_TAU3_URL", url)
        with pytest.raises(MissingDataError, match=r"is not the official retail_tasks\.json") as raised:
            tau3.task_file("retail")
    assert "SCOPE_TAU3_DATA" in str(raised.value) and "github.com/sierra-research/tau2-bench" in str(raised.value)
    assert not nothing_local.exists() or not any(nothing_local.iterdir())


def test_an_unreachable_home_is_one_line_naming_the_setting(nothing_local):
    with pytest.raises(MissingDataError, match=r"could not download http://127\.0\.0\.1:9/") as raised:
        tau3.task_file("airline")
    message = str(raised.value)
    assert "\n" not in message and "Set SCOPE_TAU3_DATA to a folder" in message and "tag v1.0.0" in message


def test_the_fetch_command_writes_a_checked_copy(tau3_dir, tmp_path, capsys):
    files = {name: tau3_dir / name for name in tau3.UPSTREAM_PATHS}
    with serving(repository(files, tmp_path / "tau2-bench")) as url:
        assert fetch.main([str(tmp_path / "copy"), "--url", url]) == 0
    assert "export SCOPE_TAU3_DATA=" in capsys.readouterr().out
    (tmp_path / "copy" / "airline_tasks.json").write_bytes(b"{}")
    assert fetch.main(["--check", str(tmp_path / "copy")]) == 1
    assert "airline_tasks.json is not the official file" in capsys.readouterr().err
