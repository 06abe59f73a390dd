"""trainer/model/cache_lock.py: two callers that miss the same cache entry together build it once; the second waits for
the first and uses its build (the test workers of `make test` both reach for the tiny model at their start)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.support.tiny_model import fast_config
from trainer.model import tiny_model
from trainer.model.cache_lock import one_builder


def test_two_callers_that_miss_the_tiny_model_together_build_it_once(tmp_path, monkeypatch):
    builds = []

    def build(config, out: Path, progress=None):  # stands in for the 3-minute build
        builds.append(threading.get_ident())
        time.sleep(0.3)
        (out / "build.json").write_text("{}")

    monkeypatch.setattr(tiny_model, "build_tiny_model", build)
    config = fast_config()
    found = []
    callers = [threading.Thread(target=lambda: found.append(tiny_model.ensure_tiny_model(config, tmp_path)))
               for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(builds) == 1, builds
    assert found[0] == found[1] == tmp_path / config.key() and (found[0] / "build.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == [config.key()]


def test_the_lock_is_exclusive_and_a_lock_that_cannot_be_opened_runs_unlocked(tmp_path):
    order = []

    def hold(name):
        with one_builder(tmp_path / "x.lock"):
            order.append(f"{name} in")
            time.sleep(0.2)
            order.append(f"{name} out")

    threads = [threading.Thread(target=hold, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert order == ["a in", "a out", "b in", "b out"], order
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    with one_builder(blocked / "x.lock"):  # its parent is a file: no lock, the body still runs
        order.append("unlocked")
    assert order[-1] == "unlocked"
