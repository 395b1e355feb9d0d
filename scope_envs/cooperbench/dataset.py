"""The CooperBench dataset: tasks, their features, the pairs that make benchmark items.

Layout (the `dataset/` folder of the CooperBench repository, or the Hugging Face dataset
`CodeConflict/cooperbench-dataset`): `<repo>_task/task<N>/feature<K>/{feature.md, feature.patch,
tests.patch}` and `subsets/{lite,flash}.json`. The data is found, in order, at: the path given by
the caller; `$SCOPE_COOPERBENCH_DATA`; the user cache; or, when asked (`download=True`), it is
downloaded once into the cache. `fetch_dataset` (`python -m scope_envs.cooperbench.fetch DIR`)
writes the files this env reads, each checked against `dataset.sha256`, into a folder.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations
from pathlib import Path

from scope_envs.core.data import DataSet, MissingDataError, keep_checked, read_url, user_cache

ENV_VAR = "SCOPE_COOPERBENCH_DATA"
DATASET_COMMIT = "44b4a7a79e7229a1baf0360aeb74648b79b7540a"
DATASET_URL = f"https://codeload.github.com/cooperbench/CooperBench/tar.gz/{DATASET_COMMIT}"
# The SHA-256 of each file this env reads (and of the dataset's README, which holds its license), in
# `sha256sum` format: `cd DIR && sha256sum -c .../dataset.sha256` checks a copy without SCOPE.
CHECKSUMS_FILE = Path(__file__).with_name("dataset.sha256")
DATASET = DataSet(
    title="the CooperBench dataset",
    setting=ENV_VAR,
    home=f"the dataset/ folder of github.com/cooperbench/CooperBench at commit {DATASET_COMMIT[:7]}, MIT",
    checksums={name: digest for digest, name in map(str.split, CHECKSUMS_FILE.read_text().splitlines())},
    fetch_module="scope_envs.cooperbench.fetch",
)

# Upstream repository of each task family, and the base commit of each task (CooperBench's Dockerfiles).
REPOSITORIES = {
    "dottxt_ai_outlines_task": "https://github.com/dottxt-ai/outlines.git",
    "dspy_task": "https://github.com/stanfordnlp/dspy.git",
    "go_chi_task": "https://github.com/go-chi/chi.git",
    "huggingface_datasets_task": "https://github.com/huggingface/datasets.git",
    "llama_index_task": "https://github.com/run-llama/llama_index.git",
    "openai_tiktoken_task": "https://github.com/openai/tiktoken",
    "pallets_click_task": "https://github.com/pallets/click.git",
    "pallets_jinja_task": "https://github.com/pallets/jinja.git",
    "pillow_task": "https://github.com/python-pillow/Pillow.git",
    "react_hook_form_task": "https://github.com/react-hook-form/react-hook-form.git",
    "samuelcolvin_dirty_equals_task": "https://github.com/samuelcolvin/dirty-equals.git",
    "typst_task": "https://github.com/typst/typst.git",
}
BASE_COMMITS = {
    "dottxt_ai_outlines_task/task1371": "7149a5e613b9c2bb3c2ed3ee5b7c9228772504b1",
    "dottxt_ai_outlines_task/task1655": "4dd7802a8a5021f31dac75bc652f88d410a28675",
    "dottxt_ai_outlines_task/task1706": "947c904608821ef6e33493181f87653e25b08862",
    "dspy_task/task8394": "3ded7a6266514c1569452b0e26bcd4e75c1ee6db",
    "dspy_task/task8563": "80412ce96d70fdb64dcf2c63940f511d6f89ca44",
    "dspy_task/task8587": "80412ce96d70fdb64dcf2c63940f511d6f89ca44",
    "dspy_task/task8635": "8f773dc75e34da21b89480e8bc71df503d5ab5fc",
    "go_chi_task/task26": "9436cc85db0d35be06e66b91b4f74bbc0295b07b",
    "go_chi_task/task27": "9436cc85db0d35be06e66b91b4f74bbc0295b07b",
    "go_chi_task/task56": "7f280968675bcc9f310008fc6b8abff0b923734c",
    "huggingface_datasets_task/task3997": "e229fade6d1a5b8eedb02370b5e6605b9b8b44aa",
    "huggingface_datasets_task/task6252": "0b55ec53e980855d71ae22f8b3d12b2a0d476a51",
    "huggingface_datasets_task/task7309": "b60ebb83cd668decaa21df66148beb44bce57739",
    "llama_index_task/task17070": "0417380ada935e277d686aef941b84032e67c57a",
    "llama_index_task/task17244": "b004ea099f70e4c660b2d8e106d461d7aa78ed5f",
    "llama_index_task/task18813": "5eca4973cef04eca5d817d3e1515c8cbe7d1cf9e",
    "openai_tiktoken_task/task0": "4560a8896f5fb1d35c6f8fd6eee0399f9a1a27ca",
    "pallets_click_task/task2068": "d791537317947448a3960662d00acf160eff2602",
    "pallets_click_task/task2800": "d8763b93021c416549b5f8b4b5497234619410db",
    "pallets_click_task/task2956": "5c1239b0116b66492cdd0848144ab3c78a04495a",
    "pallets_jinja_task/task1465": "20eb7f5e33120f1717b78bdf85540ab75631187a",
    "pallets_jinja_task/task1559": "896a62135bcc151f2997e028c5125bec2cb2431f",
    "pallets_jinja_task/task1621": "a2920752fd111c2d52c88eb57487667b3cf0ea7b",
    "pillow_task/task25": "869aa5843c79c092db074b17234e792682eada41",
    "pillow_task/task290": "cc927343dadc4d5c53afebba9c41fe02b6d7bbe4",
    "pillow_task/task68": "5d52ede584c5137f3a0b00be97dea8764404306b",
    "react_hook_form_task/task153": "cec3267e12aaee01b6a17b657f9297021defdc50",
    "react_hook_form_task/task85": "b5863b46346416972c025f4b621cb624ffc4a955",
    "samuelcolvin_dirty_equals_task/task43": "593bcccf738ab8b724d7cb860881d74344171f5f",
    "typst_task/task6554": "b8034a343831e8609aec2ec81eb7eeda57aa5d81",
}
# Task families whose tests are not Python (pytest) and need another toolchain.
NON_PYTHON = frozenset({"go_chi_task", "react_hook_form_task", "typst_task"})


class DatasetNotFoundError(MissingDataError):
    """No CooperBench dataset could be found or downloaded."""


@dataclass(frozen=True)
class Feature:
    """One feature of a task: the spec an agent receives, the gold patch and the hidden tests."""

    number: int
    description: str
    patch: str
    tests_patch: str


@dataclass(frozen=True)
class Task:
    repo: str
    number: int
    path: Path
    features: dict[int, Feature] = field(repr=False)

    @property
    def name(self) -> str:
        return f"{self.repo}/task{self.number}"

    @property
    def base_commit(self) -> str | None:
        return BASE_COMMITS.get(self.name)

    @property
    def url(self) -> str | None:
        return REPOSITORIES.get(self.repo)

    def pairs(self) -> list[tuple[int, int]]:
        return list(combinations(sorted(self.features), 2))


@dataclass(frozen=True)
class PairItem:
    """A benchmark item: two features of one task. The agent side gets `first`, the user side `second`."""

    task: Task
    first: int
    second: int
    split: str

    @property
    def item_id(self) -> str:
        return f"{self.task.name}:{self.first}+{self.second}"


ITEM_ID = re.compile(r"^(?P<task>[\w.-]+/task\d+):(?P<first>\d+)\+(?P<second>\d+)$")


def parse_item_id(item_id: str) -> tuple[str, int, int]:
    match = ITEM_ID.match(item_id)
    if not match:
        raise ValueError(f"a CooperBench task_id looks like 'pallets_jinja_task/task1621:1+6', got {item_id!r}")
    return match["task"], int(match["first"]), int(match["second"])


def cache_dir() -> Path:
    return user_cache("cooperbench")


def _is_dataset(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*_task/task*/feature*/feature.md"))


def locate_dataset(path: str | os.PathLike[str] | None = None, *, download: bool = False) -> Path:
    """The dataset root; else `DatasetNotFoundError`, one line naming the setting and the data's home."""
    if path is not None:
        root = Path(path)
        if not _is_dataset(root):
            raise DatasetNotFoundError(f"no CooperBench dataset at {root} (expected <repo>_task/task<N>/feature<K>/)")
        return root
    tried = []
    for label, candidate in ((f"${ENV_VAR}", os.environ.get(ENV_VAR)), ("the cache", cache_dir() / "dataset")):
        if candidate and _is_dataset(Path(candidate)):
            return Path(candidate)
        tried.append(f"{label}: nothing at {candidate}" if candidate else f"{label}: unset")
    if download:
        return download_dataset()
    found = "; ".join(tried)
    raise DatasetNotFoundError(DATASET.message(f"CooperBench dataset not found ({found}; download=True fetches it)"))


def fetch_dataset(folder: Path, archive_url: str = DATASET_URL, *, timeout: float = 120.0) -> Path:
    """The files of `DATASET` from the repository's archive at the commit (or a copy of that archive)
    into `folder`, kept only when every one of them matches its checksum; else `MissingDataError`."""
    try:
        payload = read_url(archive_url, timeout)
        with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as archive:
            files = {}
            for member in archive.getmembers():
                name = member.name.partition("/dataset/")[2]
                if member.isfile() and name in DATASET.checksums:
                    files[name] = archive.extractfile(member).read()
    except (OSError, tarfile.TarError) as error:
        raise DATASET.error(f"could not read {archive_url} ({error})") from error
    absent = sorted(set(DATASET.checksums) - set(files))
    if absent:
        raise DATASET.error(f"{archive_url} lacks {len(absent)} files of the dataset, among them {absent[0]}")
    return keep_checked(DATASET, files, folder, dict.fromkeys(files, archive_url))


def download_dataset(timeout: float = 120.0) -> Path:
    """Fetches the dataset once into the cache (`<cache>/dataset`), whole or not at all."""
    target = cache_dir() / "dataset"
    staging = Path(tempfile.mkdtemp(prefix="dataset-", dir=_ensure(cache_dir())))
    try:
        fetch_dataset(staging, timeout=timeout)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@lru_cache(maxsize=64)
def load_task(root: Path, name: str) -> Task:
    """One task (`"pallets_jinja_task/task1621"`) with all its features."""
    repo, _, task_dir = name.partition("/")
    path = Path(root) / repo / task_dir
    if not re.fullmatch(r"task\d+", task_dir) or not path.is_dir():
        raise ValueError(f"no CooperBench task {name!r} under {root}")
    features = {}
    for feature_dir in sorted(path.glob("feature*")):
        number = int(feature_dir.name.removeprefix("feature"))
        features[number] = Feature(
            number,
            (feature_dir / "feature.md").read_text(encoding="utf-8"),
            (feature_dir / "feature.patch").read_text(encoding="utf-8"),
            (feature_dir / "tests.patch").read_text(encoding="utf-8"),
        )
    return Task(repo, int(task_dir.removeprefix("task")), path, features)


def task_names(root: Path) -> list[str]:
    names = [f"{p.parent.name}/{p.name}" for p in Path(root).glob("*_task/task*") if p.is_dir()]
    return sorted(set(names), key=lambda n: (n.split("/")[0], int(n.split("task")[-1])))


def subset_pairs(root: Path, subset: str = "lite") -> set[tuple[str, int, int]]:
    """The (task name, first, second) pairs of a subset file (`lite` or `flash`)."""
    path = Path(root) / "subsets" / f"{subset}.json"
    if not path.is_file():
        return set()
    data = json.loads(path.read_text(encoding="utf-8"))
    pairs = set()
    for entry in data.get("tasks", []):
        name = f"{entry['repo']}/task{entry['task_id']}"
        for first, second in entry.get("pairs", []):
            pairs.add((name, *sorted((int(first), int(second)))))
    return pairs


def iter_items(root: Path, tasks: list[str], runnable: dict[str, set[int]]) -> Iterator[PairItem]:
    """Every pair of the named tasks whose two features are runnable; lite-subset pairs are `test`."""
    held_out = subset_pairs(root, "lite")
    for name in tasks:
        task = load_task(Path(root), name)
        for first, second in task.pairs():
            if {first, second} <= runnable.get(name, set()):
                split = "test" if (name, first, second) in held_out else "train"
                yield PairItem(task, first, second, split)
