"""Named crash points, for tests that kill a run at an exact moment and check that it resumes.

`failpoint("checkpoint", step)` does nothing unless `$SCOPE_FAILPOINT` is `checkpoint@<step>`;
then the process kills itself with SIGKILL there, as an out-of-memory kill or a lost node would:
no cleanup, no flushed buffers, no `finally`.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "SCOPE_FAILPOINT"


def failpoint(name: str, step: int) -> None:
    if os.environ.get(ENV_VAR) == f"{name}@{step}":
        os.kill(os.getpid(), signal.SIGKILL)
