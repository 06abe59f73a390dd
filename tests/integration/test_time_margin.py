"""The time-limit margin (issue 29, item 6) with a real signal to a real training process: `orchestrate train` on the
tiny model (DeepSpeed ZeRO-3 on a CPU rank, a real MLflow store), validating every step, sent SIGUSR2 (what
Slurm's --signal=USR2@signal_delay_s sends before the time limit) once step 1 is logged.

What must hold wherever in a step the signal lands: the job checkpoints the step in flight and stops, no step
after it starts, and the step the warning interrupted runs no validation (nor weight sync): its checkpoint starts
once its update is done. Only a signal landing in the few instructions between step 1's log and its end leaves
step 1 as the checkpoint; the test polls fast so that it lands in step 2 (its rollouts and update are nearly all
of a step), and says which case it saw."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.support.trainer_run import config_dict

pytestmark = pytest.mark.slow
STEPS = 40  # far more than the test waits for: the run ends by the signal, never by its last step


def _val_steps(db) -> dict[str, list[int]]:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    (run,) = client.search_runs([client.get_experiment_by_name("trainer-tests").experiment_id])
    return {k: sorted(m.step for m in client.get_metric_history(run.info.run_id, k))
            for k in ("val/pass_at_1", "train/loss")}


def test_the_warning_stops_validation_and_new_steps_and_checkpoints_at_once(tmp_path):
    d = config_dict(tmp_path, {"placement": "none", "beta": 0.0}, optim={"steps": STEPS},
                    data={"val_every": 1, "val_size": 16}, checkpoint={"every": 1000, "keep_last": 2})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(d))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "train", str(config), "--run-dir",
                             str(run_dir)], env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    logged, deadline = run_dir / "logged_step", time.time() + 300
    while not (logged.exists() and logged.read_text().strip() == "1"):
        assert proc.poll() is None, "the run ended before the signal:\n" + proc.stdout.read()
        assert time.time() < deadline, "step 1 was not logged in 300 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGUSR2)
    signalled = time.monotonic()
    out, _ = proc.communicate(timeout=300)
    took = time.monotonic() - signalled
    assert proc.returncode == 0, out[-3000:]

    ckpt = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"]
    last = int(logged.read_text())
    steps = _val_steps(tmp_path / "mlflow.db")
    print(f"signal after step 1 was logged: checkpoint at step {ckpt}, {took:.1f} s from the signal to the exit")
    assert ckpt == last and steps["train/loss"][-1] == ckpt, (ckpt, last, steps)  # no step after the checkpoint
    assert ckpt in (1, 2), f"steps went on after the warning: checkpoint at {ckpt}"
    if ckpt == 2:  # the warning came during step 2's rollouts or update: no validation for it
        assert steps["val/pass_at_1"] == [1], steps
    assert not (run_dir / "export").exists(), "a preempted job spends no time on the final export"
