"""The hand-run path of the README, as a user tries it: `orchestrate train CONFIG --run-dir DIR`, then
`orchestrate eval DIR` and `orchestrate eval DIR/checkpoints/step_N` on what the training wrote (issue 23: the
training left no config.yaml, so both evaluations refused the directory)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.trainer_run import CONFIGS, config_dict

pytestmark = pytest.mark.slow


def test_train_then_eval_the_run_dir_and_its_checkpoint(tmp_path, capsys):
    from orchestrator.cli import main
    from record.identity.run_key import run_key
    from trainer.config.run import RunConfig

    d = config_dict(tmp_path, CONFIGS["k3-loss"], checkpoint={"every": 2, "keep_last": 1},
                    eval={"tasks": ["tiny"], "k": 2, "max_tokens": 12})
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump(d))
    run_dir = tmp_path / "try"
    assert main(["train", str(config), "--run-dir", str(run_dir), "--micro-groups", "2"]) == 0
    written = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert run_key(written) == run_key(RunConfig.from_dict(d))  # the run dir names what it trained

    assert main(["eval", str(run_dir), "--limit", "4"]) == 0
    assert (run_dir / "eval" / "step_000002" / "tiny.done.json").is_file()
    checkpoint = run_dir / "checkpoints" / "step_000002"
    assert checkpoint.is_dir()
    assert main(["eval", str(checkpoint), "--limit", "4", "--k", "1", "--force"]) == 0
    done = json.loads((run_dir / "eval" / "step_000002" / "tiny.done.json").read_text())
    assert done  # the checkpoint's evaluation lands in its own run dir, at its step
    out = capsys.readouterr().out
    assert "mean@2" in out and "mean@1" in out

    # Training another config into the same directory is refused, naming both run_keys; nothing is mixed.
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**d, "seed": 7}))
    assert main(["train", str(other), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "holds another run" in err and run_key(written) in err and "Traceback" not in err
