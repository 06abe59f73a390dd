"""The reward on real completions (issue 23, item 3): tests/fixtures/smollm2_completions.jsonl holds 52 completions
of SmolLM2-135M-Instruct (tests/fixtures/make_smollm2_completions.py says how they were sampled), each labelled by
hand with the final boxed answer a reader takes from it (`label`, null when there is none: no box, or a last box
that never closes) and whether that answer equals the gold one (`correct`, by the project's rule: the last box
counts, nothing else). The training reward and the evaluation grader must grade each exactly as labelled.

What the file shows about this model: it answers in prose and rarely boxes (19 of the 52 have no final box, 11 of
those with the right answer in prose), copies the instruction's example box (`\\boxed{5}`, `\\boxed{answer}`,
`\\boxed{number}`), leaves boxes empty or unclosed, and boxes the right answer in 7, two of them in another form
than the gold one (0.75 for 3/4, 1.5 for 3/2: Math-Verify's path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.answers import grade
from trainer.tasks.rewards import normalise, reward_fn

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "smollm2_completions.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def test_the_fixture_is_the_size_and_mix_the_issue_asks_for():
    assert len(ROWS) >= 40
    correct = [r for r in ROWS if r["correct"]]
    assert len(correct) >= 5 and len(ROWS) - len(correct) >= 30
    assert any(r["correct"] and normalise(r["label"]) != normalise(r["gold"]) for r in ROWS)  # Math-Verify decides
    assert any(r["label"] is None and r["gold"] in r["completion"] for r in ROWS)  # right in prose, never boxed
    assert all(set(r) >= {"prompt", "gold", "completion", "label", "correct", "note"} for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}-{r['note'][:30]}" for i, r in enumerate(ROWS)])
def test_training_reward_and_eval_grader_grade_each_completion_as_labelled(row):
    example = {"problem": row["prompt"], "answer": row["gold"]}
    reward = reward_fn("math")(row["completion"], example)
    score, answer = grade("math", row["completion"], {"answer": row["gold"]})
    assert reward == score == float(row["correct"]), row["note"]
    if row["label"] is not None:  # the answer the grader votes with is the one a reader reads
        assert answer is not None and normalise(answer) == normalise(row["label"]), (answer, row["label"])
