"""Every field of the run config is classified (record/identity/fields.py), and nothing classified is gone: a new field
cannot enter or leave an identity without a decision."""

from __future__ import annotations

import re
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

from record.identity import fields as fields_table
from trainer.config.run import RunConfig


def config_paths(cls, prefix: str = "") -> list[str]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        if is_dataclass(hints[f.name]):
            out += config_paths(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def test_every_run_config_field_is_classified():
    missing = [p for p in config_paths(RunConfig) if p not in fields_table.FIELDS]
    assert not missing, f"classify these in record/identity/fields.py (computes, evaluates or machinery): {missing}"


def test_nothing_classified_is_gone():
    stale = sorted(set(fields_table.FIELDS) - set(config_paths(RunConfig)))
    assert not stale, f"record/identity/fields.py classifies fields the run config no longer has: {stale}"


def test_classes_are_the_three():
    assert set(fields_table.FIELDS.values()) == {fields_table.COMPUTES, fields_table.EVALUATES,
                                                  fields_table.MACHINERY}
    # every eval field but how the work is cut into lm-eval calls (eval/shard_plan.py: the same samples on HF)
    assert all(fields_table.of(p) == fields_table.EVALUATES for p in fields_table.FIELDS
               if p.startswith("eval.") and p != "eval.shard_samples")
    assert fields_table.of("eval.shard_samples") == fields_table.MACHINERY
    # and only they: record/identity/run_key.py `eval_id` hashes a RunConfig's eval section alone
    assert all(p.startswith("eval.") for p in fields_table.paths(fields_table.EVALUATES))


def test_the_identity_page_lists_each_field_under_its_class():
    """docs/orchestration.md "Identity" has one table row per class naming its fields: it may not drift."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "orchestration.md").read_text()
    section = page.split("## Identity", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for kind in (fields_table.COMPUTES, fields_table.EVALUATES, fields_table.MACHINERY):
        (row,) = [line for line in section.splitlines() if line.startswith(f"| **{kind}**")]
        listed[kind] = set(re.findall(r"`([a-z_.]+)`", row.split("|")[2]))
        assert listed[kind] == set(fields_table.paths(kind)), kind
