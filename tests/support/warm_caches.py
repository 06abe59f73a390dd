"""The builds the integration tier shares, started once at the beginning of a parallel session (tests/conftest.py).

A fresh clone has neither the tiny model (about 2.5 minutes of one core) nor SmolLM2's conversion (about 40 s): the
first test to need each builds it while the others that need it wait on its lock (trainer/model/cache_lock.py). Started
here, beside the unit tests that the other workers run first, the builds are done (or under way) by the time the
first integration test asks.

    python -m tests.support.warm_caches     # what the session starts in the background
"""

from __future__ import annotations

import time


def main() -> None:
    from trainer.model.source import ensure_smollm2
    from trainer.model.tiny_model import ensure_tiny_model

    for name, build in (("tiny model", ensure_tiny_model), ("SmolLM2-135M-Instruct", ensure_smollm2)):
        start = time.monotonic()
        path = build()
        print(f"[warm-caches] {name}: {path} ({time.monotonic() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
