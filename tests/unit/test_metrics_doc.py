"""docs/metrics.md and record/metric_keys.py list the same keys, and every key is one MLflow accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from record.metric_keys import EVAL_PASS_AT_K, METRICS, TAGS, VAL_SPLIT_PASS_AT_1, metric_key
from record.tracking.key_rules import check_keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented_keys() -> set[str]:
    """The first cell of every table row: | `key` | meaning |."""
    return set(re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), flags=re.M))


def test_the_doc_lists_every_metric_and_tag():
    missing = sorted((METRICS.keys() | TAGS.keys()) - documented_keys())
    assert not missing, f"add these to docs/metrics.md: {missing}"


def test_the_doc_lists_nothing_the_module_does_not_know():
    extra = sorted(documented_keys() - METRICS.keys() - TAGS.keys())
    assert not extra, f"add these to record/metric_keys.py (or drop them from docs/metrics.md): {extra}"


def test_the_paper_names_are_there():
    for key in ("train/kl_k1", "train/kl_k2", "train/kl_k3", "val/pass_at_1", "eval/<task>/mean_at_32",
                "collapse/verdict", "run_key", "sweep_id"):
        assert key in METRICS or key in TAGS


def test_every_key_with_its_placeholders_filled_is_accepted_by_mlflow_rules():
    filled = [metric_key(k, split="math500", task="math500", k=8) for k in METRICS]
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
