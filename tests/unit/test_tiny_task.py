"""The synthetic task: deterministic, correct, and with disjoint train / test / ood splits."""

from __future__ import annotations

import re

import pytest

from trainer.tasks import tiny as tiny_task
from trainer.tasks.common import read_jsonl, write_jsonl
from trainer.tasks.rewards import tiny_reward


def _operands(example: dict) -> tuple[int, str, int]:
    a, op, b = re.fullmatch(r"(\d+)([+-])(\d+)", example["expression"]).groups()
    return int(a), op, int(b)


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return {s: tiny_task.make_split(s, seed=0) for s in tiny_task.SPLITS}


def test_schema_and_answers(splits):
    for split, examples in splits.items():
        for ex in examples[:500]:
            assert isinstance(ex["problem"], str) and isinstance(ex["answer"], str)
            assert ex["split"] == split
            a, op, b = _operands(ex)
            assert int(ex["answer"]) == (a + b if op == "+" else a - b)
            assert ex["expression"] in ex["problem"]
            assert tiny_reward(f"\\boxed{{{ex['answer']}}}", ex["answer"]) == 1.0


def test_splits_are_disjoint_and_cover_the_domain(splits):
    problems = {s: {ex["expression"] for ex in examples} for s, examples in splits.items()}
    assert not problems["train"] & problems["test"]
    assert not problems["ood"] & (problems["train"] | problems["test"])
    universe_in = len(tiny_task.DOMAIN.universe(ood=False))
    assert len(problems["train"]) + len(problems["test"]) == universe_in
    assert 0.07 < len(problems["test"]) / universe_in < 0.13  # one bucket in ten
    assert len(problems["ood"]) == len(tiny_task.DOMAIN.universe(ood=True))
    assert len({ex["unique_id"] for s in splits.values() for ex in s}) == sum(map(len, splits.values()))


def test_in_domain_and_out_of_domain_regions(splits):
    threshold = tiny_task.DOMAIN.threshold
    for split in ("train", "test"):
        assert all(min(_operands(ex)[::2]) < threshold for ex in splits[split])
    assert all(min(_operands(ex)[::2]) >= threshold for ex in splits["ood"])
    ops = {_operands(ex)[1] for ex in splits["train"]}
    assert ops == set(tiny_task.DOMAIN.ops)
    assert any(int(ex["answer"]) < 0 for ex in splits["train"])  # subtraction reaches negative answers


def test_deterministic_and_prefix_stable():
    assert tiny_task.make_split("train", 50, seed=3) == tiny_task.make_split("train", 50, seed=3)
    assert tiny_task.make_split("test", 20, seed=3) == tiny_task.make_split("test", 40, seed=3)[:20]
    assert tiny_task.make_split("train", 50, seed=3) != tiny_task.make_split("train", 50, seed=4)


def test_test_partition_depends_on_seed_not_on_sizes():
    test0 = {ex["expression"] for ex in tiny_task.make_split("test", seed=0)}
    test1 = {ex["expression"] for ex in tiny_task.make_split("test", seed=1)}
    assert test0 != test1
    small = {ex["expression"] for ex in tiny_task.make_split("test", 10, seed=0)}
    assert small <= test0


def test_bad_arguments():
    with pytest.raises(ValueError, match="valid: train, test, ood"):
        tiny_task.make_split("validation")
    with pytest.raises(ValueError, match="holds"):
        tiny_task.make_split("test", 10**6)
    with pytest.raises(ValueError, match="negative"):
        tiny_task.make_split("test", -1)


def test_jsonl_round_trip(tmp_path):
    path = write_jsonl(tiny_task.make_split("test", 25, seed=0), tmp_path / "sub" / "test.jsonl")
    assert read_jsonl(path) == tiny_task.make_split("test", 25, seed=0)
    assert len(path.read_text().splitlines()) == 25
