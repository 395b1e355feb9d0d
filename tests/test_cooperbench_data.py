"""The CooperBench dataset is never shipped: found through $SCOPE_COOPERBENCH_DATA (or the cache),
fetched only when asked, every file this env reads checked against `dataset.sha256`. The fetch
reads a real archive laid out as the repository's, over HTTP on loopback."""

import io
import tarfile

import pytest
from local_data import COOPERBENCH, mirror, require, serving

from baselines.cli import main as scope
from scope_envs.cooperbench import fetch
from scope_envs.cooperbench.dataset import DATASET, DATASET_COMMIT, DatasetNotFoundError, fetch_dataset, locate_dataset
from scope_envs.core.data import MissingDataError

PREFIX = f"CooperBench-{DATASET_COMMIT}/dataset/"


def archive(files: dict[str, bytes]) -> bytes:
    """A .tar.gz laid out as GitHub's archive of the repository at the commit."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            member = tarfile.TarInfo(PREFIX + name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    monkeypatch.delenv("SCOPE_COOPERBENCH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_without_the_dataset_one_line_names_the_setting_and_nothing_goes_online(nowhere, capsys):
    with pytest.raises(DatasetNotFoundError) as raised:
        locate_dataset()
    message = str(raised.value)
    assert "\n" not in message and "Set SCOPE_COOPERBENCH_DATA to a folder" in message
    assert "github.com/cooperbench/CooperBench at commit 44b4a7a" in message and "download=True" in message
    assert scope(["play", "CooperBench", "--episodes", "1"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("scope play: CooperBench dataset not found") and "scope_envs.cooperbench.fetch" in line


def test_the_local_copy_is_the_official_files(capsys):
    copy = require(COOPERBENCH)
    assert fetch.main(["--check", str(copy)]) == 0
    assert "the 600 files of the CooperBench dataset match" in capsys.readouterr().out


def test_fetch_keeps_the_files_this_env_reads_checked(tmp_path):
    copy = require(COOPERBENCH)
    files = {name: (copy / name).read_bytes() for name in DATASET.checksums}
    files["pallets_jinja_task/task1621/Dockerfile"] = b"FROM scratch"  # upstream holds more than this env reads
    served = mirror({"repository.tar.gz": archive(files)}, tmp_path)
    with serving(served) as url:
        assert fetch.main([str(tmp_path / "copy"), "--url", url + "repository.tar.gz"]) == 0
    assert DATASET.problems(tmp_path / "copy") == []
    assert not (tmp_path / "copy" / "pallets_jinja_task" / "task1621" / "Dockerfile").exists()  # not read, not kept
    assert locate_dataset(tmp_path / "copy") == tmp_path / "copy"


def test_fetch_keeps_nothing_when_a_file_differs_or_is_absent(tmp_path):
    """No dataset needed: every file served here differs from the official one."""
    changed = archive(dict.fromkeys(DATASET.checksums, b"changed"))
    partial = archive({"README.md": b"changed"})
    served = mirror({"changed.tar.gz": changed, "partial.tar.gz": partial, "broken.tar.gz": b"not gzip"}, tmp_path)
    with serving(served) as url:
        with pytest.raises(MissingDataError, match=r"is not the official README\.md") as raised:
            fetch_dataset(tmp_path / "copy", url + "changed.tar.gz")
        with pytest.raises(MissingDataError, match="lacks 599 files of the dataset"):
            fetch_dataset(tmp_path / "copy", url + "partial.tar.gz")
        with pytest.raises(MissingDataError, match="could not read"):
            fetch_dataset(tmp_path / "copy", url + "broken.tar.gz")
    assert not (tmp_path / "copy").exists()
    assert "SCOPE_COOPERBENCH_DATA" in str(raised.value) and "\n" not in str(raised.value)
