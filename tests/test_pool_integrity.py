"""Simulator pool snapshots carry the checksums of a training checkpoint: a damaged snapshot is
found before it is loaded and refused with a message naming it, in the pool and in a run."""

import json

import pytest

from sims.pool import CheckpointPool, DamagedSnapshot


def weights(text):
    return lambda directory: (directory / "weights.txt").write_text(text)


def read_weights(directory):
    return (directory / "weights.txt").read_text()


def test_a_snapshot_is_written_with_the_checksums_of_its_files(tmp_path):
    pool = CheckpointPool(tmp_path, loader=read_weights)
    member = pool.add(weights("w0"), step=3)
    manifest = json.loads((pool.path(member) / "manifest.json").read_text())
    assert manifest["step"] == 3 and set(manifest["files"]) == {"weights.txt"}
    assert pool.load(member) == "w0"


def test_a_copied_checkpoint_is_checksummed_afresh(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "weights.txt").write_text("w0")
    (source / "manifest.json").write_text("{}")  # an earlier manifest never vouches for itself
    pool = CheckpointPool(tmp_path / "pool", loader=read_weights)
    assert pool.load(pool.add(source, step=1)) == "w0"


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda d: (d / "weights.txt").write_text("w9"), "weights.txt does not match its checksum"),
        (lambda d: (d / "weights.txt").write_text("w"), "weights.txt has 1 bytes, the manifest says 2"),
        (lambda d: (d / "weights.txt").unlink(), "weights.txt is missing"),
        (lambda d: (d / "manifest.json").unlink(), "no manifest.json"),
    ],
)
def test_a_damaged_snapshot_is_refused_never_loaded(tmp_path, damage, problem):
    CheckpointPool(tmp_path, max_size=2).add(weights("w0"), step=4)
    loaded = []
    pool = CheckpointPool(tmp_path, max_size=2, loader=lambda d: loaded.append(d), read_only=True)
    damage(pool.path(pool.members[0]))
    with pytest.raises(DamagedSnapshot, match=rf"snapshot ckpt-000000 \(step 4\) in .* is damaged: {problem}"):
        pool.load(pool.members[0])
    assert loaded == []


torch = pytest.importorskip("torch")

from training_helpers import TINY_POPULATION  # noqa: E402

from baselines.cli import main  # noqa: E402


def test_a_run_refuses_to_resume_from_a_pool_with_a_damaged_snapshot(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY_POPULATION, f"output_dir={out}"]) == 0
    snapshot = out / "sim_pool" / "ckpt-000001" / "policy.pt"
    data = bytearray(snapshot.read_bytes())
    data[len(data) // 2] ^= 1  # one bit flipped: same size, another checksum
    snapshot.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["train", *TINY_POPULATION, "steps=3", f"output_dir={out}", "--resume"]) == 1
    error = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert error.startswith("scope train: simulator pool snapshot ckpt-000001 (step 1)")
    assert "policy.pt does not match its checksum" in error and "--overwrite" in error
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
