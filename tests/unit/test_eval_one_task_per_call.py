"""One lm-eval call per task (issue 29, item 5): a time limit that ends an evaluation in its second task keeps the
first task's result, and the requeued evaluation runs only what is left. Real lm-eval (TaskManager,
simple_evaluate) on the project's task files, a scripted LM in place of the model (its numbers are not the point)."""

from __future__ import annotations

import pytest
from lm_eval.api.model import LM

from eval import backends
from eval import evaluate as eval_run
from tests.fixtures.eval_data import prepare_fixture_data

TASKS = ["tiny", "tiny_ood"]


class Boxed(LM):
    def generate_until(self, requests, disable_tqdm=False):
        return ["\\boxed{1}" for _ in requests]

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError


class TimeLimit(Exception):
    """Stands in for the job being ended by Slurm in the middle of a task."""


def test_a_time_limit_loses_at_most_the_task_in_progress(tmp_path, monkeypatch):
    from tests.support.tiny_model import fast_config
    from trainer.model.tiny_model import ensure_tiny_model

    model = ensure_tiny_model(fast_config())  # cached under .cache/tiny-model: only its tokenizer is read here
    data = prepare_fixture_data(tmp_path / "data")
    monkeypatch.setattr(backends, "hf_lm", lambda *a, **k: Boxed())
    real, calls = eval_run.lm_eval.simple_evaluate, []

    def limited(**kwargs):
        calls.append(kwargs["tasks"])
        if len(calls) == 2 and limit_hits:
            raise TimeLimit
        return real(**kwargs)

    monkeypatch.setattr(eval_run.lm_eval, "simple_evaluate", limited)
    args = dict(tasks=TASKS, limit=3, k=2, seeds=[0], backend="hf", chat_template=False, max_tokens=8, data_dir=data,
                out_dir=tmp_path / "out", log=lambda _: None)
    limit_hits = True
    with pytest.raises(TimeLimit):
        eval_run.evaluate(model, **args)
    assert calls == [["tiny"], ["tiny_ood"]]  # one task a call
    calls.clear()
    limit_hits = False
    summary = eval_run.evaluate(model, **args)  # the requeued job
    assert calls == [["tiny_ood"]], "the finished task was evaluated again"
    assert {t: summary["tasks"][t]["status"] for t in TASKS} == {"tiny": "evaluated", "tiny_ood": "evaluated"}
