"""docs/metrics.md and record/metric_keys.py list the same keys, docs/metrics.md has one row per registered KL
estimator (trainer/objective/estimators.py), and every key is one MLflow accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from record.metric_keys import (
    EVAL_PASS_AT_K,
    METRICS,
    TAGS,
    TRAIN_KL_ESTIMATOR,
    VAL_SPLIT_PASS_AT_1,
    metric_key,
    step_key,
    template_of,
)
from record.tracking.key_rules import check_keys
from trainer.objective.estimators import ESTIMATORS, Estimator

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented_keys(text: str | None = None) -> set[str]:
    """The first cell of every table row: | `key` | meaning |."""
    return set(re.findall(r"^\| `([^`]+)` \|", DOC.read_text() if text is None else text, flags=re.M))


def estimator_row(est: Estimator) -> str:
    """An estimator's row in docs/metrics.md, from its registration alone."""
    mean = "unbiased: its mean is the KL" if est.unbiased else "biased: its mean is not the KL"
    return (f"| `{metric_key(TRAIN_KL_ESTIMATOR, estimator=est.name)}` | {est.name} = {est.token_form} "
            f"(r = pi_ref / pi_theta), summed over a response's tokens; {mean} |")


def estimator_rows(doc: str) -> list[str]:
    """The rows of the doc's `train/kl_<estimator>` section."""
    section = doc.split("### `train/kl_<estimator>`", 1)[1].split("\n#", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def estimator_keys() -> set[str]:
    return {metric_key(TRAIN_KL_ESTIMATOR, estimator=name) for name in ESTIMATORS}


def test_the_doc_lists_every_metric_and_tag():
    missing = sorted((METRICS.keys() | TAGS.keys()) - documented_keys())
    assert not missing, f"add these to docs/metrics.md: {missing}"


def test_the_doc_lists_nothing_the_module_does_not_know():
    extra = sorted(documented_keys() - METRICS.keys() - TAGS.keys() - estimator_keys())
    assert not extra, f"add these to record/metric_keys.py (or drop them from docs/metrics.md): {extra}"


def test_every_registered_estimator_has_its_row_and_every_row_an_estimator():
    want = [estimator_row(est) for est in ESTIMATORS.values()]
    assert estimator_rows(DOC.read_text()) == want, (
        "docs/metrics.md's `train/kl_<estimator>` table should read:\n" + "\n".join(want))


def test_the_row_check_sees_a_missing_estimator(monkeypatch):
    """A registered estimator without its row fails the check above (the registry gains one here, for this test)."""
    monkeypatch.setitem(ESTIMATORS, "k9", Estimator("k9", lambda logp, ref: logp - ref, "2 log r", False, "biased"))
    want = [estimator_row(est) for est in ESTIMATORS.values()]
    assert estimator_rows(DOC.read_text()) != want and want[-1] not in DOC.read_text()
    assert "train/kl_k9" in estimator_keys() - documented_keys()


def test_the_paper_names_are_there():
    for key in ("train/kl_k1", "train/kl_k2", "train/kl_k3", "val/pass_at_1", "eval/<task>/mean_at_32",
                "collapse/verdict", "run_key", "sweep_id"):
        assert template_of(key) or key in TAGS
    assert {"k1", "k2", "k3"} <= set(ESTIMATORS)


def test_an_estimators_key_follows_from_its_name():
    """record/ cannot import the trainer's registry: one template stands for every estimator's key."""
    assert step_key("kl_k3") == "train/kl_k3" == metric_key(TRAIN_KL_ESTIMATOR, estimator="k3")
    assert step_key("kl_new_one") == "train/kl_new_one" and template_of("train/kl_new_one") == TRAIN_KL_ESTIMATOR
    assert step_key("kl_loss") == "train/kl_loss" and template_of("train/kl_loss") == "train/kl_loss"  # its own
    assert template_of("train/nothing") is None and template_of("train/kl_") is None
    with pytest.raises(KeyError, match="unknown step metric"):
        step_key("nothing")


def test_every_key_with_its_placeholders_filled_is_accepted_by_mlflow_rules():
    filled = [metric_key(k, split="math500", task="math500", k=8, estimator="k1") for k in METRICS]
    filled += sorted(estimator_keys())
    check_keys(filled, "metric")
    check_keys(TAGS, "tag")
    assert not any("@" in k for k in filled)


def test_metric_key_fills_placeholders_and_refuses_unknown_or_incomplete_templates():
    assert metric_key(EVAL_PASS_AT_K, task="math500", k=8) == "eval/math500/pass_at_8"
    assert metric_key(VAL_SPLIT_PASS_AT_1, split="countdown") == "val/countdown/pass_at_1"
    assert metric_key("train/loss") == "train/loss"
    with pytest.raises(KeyError, match="needs k"):
        metric_key(EVAL_PASS_AT_K, task="math500")
    with pytest.raises(KeyError, match="unknown metric"):
        metric_key("val/pass@1")
