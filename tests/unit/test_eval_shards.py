"""The shard plan and the shard files (eval/shard_plan.py): pure planning, a marker that counts only for its own
provenance and range, a samples file without its marker (a shard killed midway) counted as unfinished, and the join
recomputing each problem's metrics from all its samples."""

from __future__ import annotations

import pytest

from eval import shard_plan
from eval.mean_at_k import problem_metrics
from eval.shard_plan import Shard
from record.rundir import EvalStep


def test_the_plan_takes_whole_problems_while_k_fits_then_splits_the_repeats():
    assert shard_plan.plan(10, 4, None) == [Shard(0, 10, 0, 4)]
    assert shard_plan.plan(10, 4, 400) == [Shard(0, 10, 0, 4)]
    assert shard_plan.plan(10, 4, 9) == [Shard(0, 2, 0, 4), Shard(2, 4, 0, 4), Shard(4, 6, 0, 4), Shard(6, 8, 0, 4),
                                         Shard(8, 10, 0, 4)]
    assert shard_plan.plan(3, 32, 10) == [Shard(p, p + 1, r, min(r + 10, 32)) for p in range(3)
                                          for r in (0, 10, 20, 30)]
    for problems, k, size in ((7, 5, 3), (500, 32, 1000), (1, 1, 1)):
        planned = shard_plan.plan(problems, k, size)
        covered = sorted((p, r) for s in planned for p in range(s.lo, s.hi) for r in range(s.r0, s.r1))
        assert covered == [(p, r) for p in range(problems) for r in range(k)]  # every sample once
        assert max(s.samples for s in planned) <= size
    with pytest.raises(ValueError, match="at least 1"):
        shard_plan.plan(10, 4, 0)


def rows(shard, scores):
    """The shard's rows as lm-eval's samples give them: its problems, its repeats' samples and grades."""
    out = []
    for d in range(shard.lo, shard.hi):
        mine = scores[d][shard.r0:shard.r1]
        out.append({"doc_id": d, "samples": [f"s{d}.{r}" for r in range(shard.r0, shard.r1)], "scores": mine,
                    "answers": [str(s) for s in mine]})
    return out


def test_markers_count_for_their_provenance_only_and_the_join_recomputes_each_problem(tmp_path):
    scores = {0: [1.0, 0.0, 1.0], 1: [0.0, 0.0, 1.0]}
    planned = shard_plan.plan(2, 3, 2)  # each problem's repeats as 0-1 and 2
    provenance = {"settings": {"k": 3}, "data_sha256": "abc", "seed": 0}
    step = EvalStep(tmp_path)
    for shard in planned:
        shard_plan.save(step, "tiny", 0, shard, rows(shard, scores), provenance, 0.1)
    assert all(shard_plan.finished(step, "tiny", 0, s, provenance) for s in planned)
    assert not shard_plan.finished(step, "tiny", 0, planned[0], {**provenance, "data_sha256": "other"})
    assert not shard_plan.finished(step, "tiny", 0, Shard(0, 1, 0, 3), provenance)
    step.shard_marker("tiny", 0, planned[1].name).unlink()  # killed after its samples
    assert not shard_plan.finished(step, "tiny", 0, planned[1], provenance)
    shard_plan.save(step, "tiny", 0, planned[1], rows(planned[1], scores), provenance, 0.1)
    joined, metrics = shard_plan.merge(step, "tiny", 0, planned)
    assert [r["samples"] for r in joined] == [["s0.0", "s0.1", "s0.2"], ["s1.0", "s1.1", "s1.2"]]
    expected = [problem_metrics(scores[d], [str(s) for s in scores[d]]) for d in (0, 1)]
    assert metrics == {m: (expected[0][m] + expected[1][m]) / 2 for m in shard_plan.METRICS}
    assert metrics["pass_at_n"] == 1.0 and metrics["acc"] == pytest.approx(0.5)


def test_a_shard_whose_rows_do_not_match_its_range_is_refused(tmp_path):
    shard = Shard(0, 2, 0, 2)
    with pytest.raises(RuntimeError, match="expected problems 0..1 with 2 samples each"):
        shard_plan.save(EvalStep(tmp_path), "tiny", 0, shard, rows(Shard(0, 2, 0, 1), {0: [1.0], 1: [0.0]}), {}, 0.1)


def test_one_evaluation_of_a_checkpoint_at_a_time_and_a_dead_holder_blocks_nothing(tmp_path):
    """Two evaluations of one checkpoint (a relaunch beside a requeue): the second waits for the first and says
    who holds the lock; a holder killed with SIGKILL releases it (the kernel drops an flock with its process)."""
    import subprocess
    import sys
    import threading
    import time

    said, order = [], []
    first_in = threading.Event()

    def first():
        with shard_plan.exclusive(EvalStep(tmp_path), said.append):
            first_in.set()
            time.sleep(0.5)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(5)
    with shard_plan.exclusive(EvalStep(tmp_path), said.append):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]
    assert len(said) == 1 and "another evaluation of this checkpoint holds" in said[0] and "pid" in said[0]

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from record.rundir import EvalStep; "
                               "from eval.shard_plan import exclusive\n"
                               "with exclusive(EvalStep(sys.argv[1]), print):\n    print('in', flush=True); "
                               "time.sleep(60)", str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "in"
    holder.kill()
    holder.wait()
    started = time.monotonic()
    with shard_plan.exclusive(EvalStep(tmp_path), said.append):
        pass
    assert time.monotonic() - started < 5 and len(said) == 1  # taken at once: nobody holds it
