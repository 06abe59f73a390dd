"""The environment of a pytest session a test starts inside itself (a check of the suite's own conftest, say).

The caller's pytest settings are not the inner session's: `PYTEST_ADDOPTS` may carry `--basetemp` (which refuses the
inner session's working directory), `-n` or `--junitxml` (which the inner session would overwrite), and pytest-xdist
marks its workers with `PYTEST_XDIST_*`. The inner session starts from none of them, whoever ran the suite and how.
"""

from __future__ import annotations

import os


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without any PYTEST_* variable (and without coverage's subprocess hook), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_CORE_"))}
    return {**env, **extra}
