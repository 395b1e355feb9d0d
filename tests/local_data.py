"""The third-party data some tests read, found only through each data set's one documented setting
(an environment variable naming a folder). A test whose data is absent skips and names the setting.
`serving` and `mirror` stand in for a data set's home: a real HTTP server on loopback."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

P4G, COOPERBENCH, TAU3 = "SCOPE_P4G_DATA", "SCOPE_COOPERBENCH_DATA", "SCOPE_TAU3_DATA"
# What a folder named by each setting holds, and the page that says where to get it.
HOLDS = {
    P4G: ("full_info.csv", "docs/envs/p4g.md"),
    COOPERBENCH: ("pallets_jinja_task", "docs/envs/cooperbench.md"),
    TAU3: ("retail_tasks.json", "docs/envs/tau2.md"),
}


def data_dir(setting: str) -> Path | None:
    """The folder `setting` names when it holds the data, else None."""
    value = os.environ.get(setting)
    return Path(value) if value and (Path(value) / HOLDS[setting][0]).exists() else None


def why_skipped(setting: str) -> str:
    holds, page = HOLDS[setting]
    return f"set {setting} to a folder holding {holds} to run this test ({page} says where to get the data)"


def require(setting: str) -> Path:
    """The data's folder; the calling test skips, naming the setting, when it is absent."""
    path = data_dir(setting)
    if path is None:
        pytest.skip(why_skipped(setting))
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(folder: Path) -> Iterator[str]:
    """A real HTTP server on loopback serving `folder`, as a data set's home would; yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def mirror(files: dict[str, Path | bytes], root: Path) -> Path:
    """A folder laid out as a data set's home (`path in the home -> a file to copy, or its bytes`)."""
    for path, source in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source if isinstance(source, bytes) else source.read_bytes())
    return root
