"""Issue 16, progress and quiet logs: a training run's steps on a terminal (a bar) and in a job log (a few plain
lines), the third-party noise filtered by name and nothing else, and `orchestrate logs` showing a progress bar
as its last state."""

from __future__ import annotations

import io
import json
import logging
import warnings

from orchestrator.cli import main
from trainer.run.progress import StepProgress, quiet_third_party

METRICS = {"train/reward_mean": 0.53125, "train/kl_k1": 0.0123456, "perf/step_time_s": 2.414}


def test_a_job_log_gets_a_line_at_the_first_and_last_step_and_every_n():
    out = io.StringIO()
    progress = StepProgress(0, 8, interactive=False, every_s=3600, every_steps=4, out=out)
    for step in range(1, 9):
        progress(step, METRICS)
    progress.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" reward")[0] for line in lines] == ["[train] step 1/8", "[train] step 4/8", "[train] step 8/8"]
    assert "reward 0.5312 kl_k1 0.01235 2.41 s/step (" in lines[0]


def test_a_job_log_gets_a_line_every_interval(monkeypatch):
    out, now = io.StringIO(), [0.0]
    monkeypatch.setattr("trainer.run.progress.time.monotonic", lambda: now[0])
    progress = StepProgress(10, 1000, interactive=False, every_s=30, every_steps=10**6, out=out)
    for step in range(11, 21):
        now[0] += 10.0  # ten seconds a step: a line every third step, after the first
        progress(step, METRICS)
    steps = [line.split("/")[0].split()[-1] for line in out.getvalue().splitlines()]
    assert steps == ["11", "14", "17", "20"]


def test_a_terminal_gets_a_bar_with_reward_kl_and_time():
    out = io.StringIO()
    progress = StepProgress(2, 8, interactive=True, out=out)
    for step in range(3, 9):
        progress(step, METRICS)
    progress.close()
    text = out.getvalue()
    assert "8/8" in text and "reward 0.5312" in text and "kl_k1 0.01235" in text and "2.41 s/step" in text
    assert "[train]" not in text


def test_other_ranks_show_nothing():
    out = io.StringIO()
    progress = StepProgress(0, 2, interactive=True, out=out, enabled=False)
    progress(1, METRICS)
    progress.close()
    assert out.getvalue() == ""


def test_only_the_known_noise_is_filtered(monkeypatch):
    from transformers.utils import logging as hf_logging

    for name in ("alembic", "mlflow.store.db.utils"):  # put back as they were after the test
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    monkeypatch.setattr(hf_logging, "_tqdm_active", hf_logging.is_progress_bar_enabled())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_third_party()
        for name in ("all_gather_into_tensor", "reduce_scatter_tensor"):
            warnings.warn(f"`torch.distributed.{name}` is deprecated. Please use `torch.distributed.x` instead.",
                          FutureWarning, stacklevel=1)
        warnings.warn("`torch.distributed.something_else` is deprecated.", FutureWarning, stacklevel=1)
        warnings.warn("`torch.distributed.all_gather_into_tensor` is deprecated.", UserWarning, stacklevel=1)
    assert [str(w.message).split("`")[1] for w in seen] == ["torch.distributed.something_else",
                                                            "torch.distributed.all_gather_into_tensor"]
    assert logging.getLogger("alembic").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("mlflow.store.db.utils").getEffectiveLevel() == logging.WARNING
    assert not hf_logging.is_progress_bar_enabled()


def test_logs_show_a_progress_bar_as_its_last_state(tmp_path, capsys):
    job_dir = tmp_path / "runs" / "smoke" / "slurm"
    job_dir.mkdir(parents=True)
    err = job_dir / "1.err"
    err.write_text("\rRunning requests:   0%| 0/1600\rRunning requests:  50%| 800/1600\rRunning requests: 100%| "
                   "1600/1600\n[eval] done\n")
    (job_dir / "1.out").write_text("[train] step 1/2\n")
    record = {"name": "k1-reward-s0", "run_key": "abcdef123456",
              "jobs": [{"kind": "train", "attempt": 1, "name": "n", "job_id": "1", "state": "COMPLETED",
                        "stdout": str(job_dir / "1.out"), "stderr": str(err)}]}
    (tmp_path / "runs" / "smoke" / "ledger").mkdir()
    (tmp_path / "runs" / "smoke" / "ledger" / "abcdef123456.json").write_text(json.dumps(record))
    assert main(["logs", "abcdef", "--root", str(tmp_path / "runs"), "--lines", "2"]) == 0
    out = capsys.readouterr().out
    assert "Running requests: 100%| 1600/1600\n[eval] done" in out
    assert "50%" not in out and "\r" not in out
