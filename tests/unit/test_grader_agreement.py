"""bench/grader_agreement.py's pure parts on a few inline rows in the fetched files' exact schemas: reading them,
refusing a row of another shape by its keys, the tally against the labels, pairwise agreement, the classes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "grader_agreement.py"
_spec = importlib.util.spec_from_file_location("grader_agreement", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# The MATH500 release's schema (prm800k math_splits/test.jsonl): level an int, unique_id its source path.
MATH500_ROW = {"problem": "Convert the point $(0,3)$ ...", "solution": "... $\\boxed{\\left( 3, \\frac{\\pi}{2} "
               "\\right)}.$", "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "subject": "Precalculus", "level": 2,
               "unique_id": "test/precalculus/807.json"}
# Qwen2.5-Math's evaluation output: k completions (`code`) and one bool label each (`score`) a problem.
LABELLED_ROW = {"idx": 0, "question": "What is ...", "gt": "420", "level": "Level 3", "answer": "420",
                "code": ["so \\[ \\boxed{420} \\]", "so \\[ \\boxed{42} \\]"], "pred": ["420", "42"],
                "score": [True, False]}


def test_math500_rows_give_the_solution_and_the_boxed_answer_as_cases():
    cases = bench.math500_cases([MATH500_ROW])
    assert [c["kind"] for c in cases] == ["solution", "boxed answer"]
    assert cases[1]["completion"] == "\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}"
    assert {c["gold"] for c in cases} == {MATH500_ROW["answer"]}


def test_a_row_of_another_schema_is_refused_naming_its_keys():
    with pytest.raises(ValueError, match="no unique_id.*keys \\['answer', 'level', 'problem', 'solution', 'subject'"):
        bench.math500_cases([{k: v for k, v in MATH500_ROW.items() if k != "unique_id"}])
    with pytest.raises(ValueError, match="level 'Level 2' is not an int"):
        bench.math500_cases([{**MATH500_ROW, "level": "Level 2"}])
    with pytest.raises(ValueError, match="2 completions but 1 labels"):
        bench.labelled_cases([{**LABELLED_ROW, "score": [True]}])


def test_labelled_rows_give_one_case_a_completion_with_its_label():
    cases = bench.labelled_cases([LABELLED_ROW])
    assert [(c["id"], c["gold"], c["label"]) for c in cases] == [("0/0", "420", 1), ("0/1", "420", 0)]


def test_the_tally_counts_agreement_and_both_kinds_of_error():
    labels = [1, 1, 0, 0]
    verdicts = {"a": [1, 0, 1, 0], "b": [1, 1, 0, 0]}
    tally = bench.against_labels(verdicts, labels)
    assert {k: tally["a"][k] for k in ("agree", "n", "fp", "fn", "right")} == \
        {"agree": 2, "n": 4, "fp": 1, "fn": 1, "right": 2}
    assert tally["b"]["agree"] == 4 and tally["b"]["ci"][0] < 1.0 <= tally["b"]["ci"][1] + 1e-12
    assert bench.pairwise(verdicts)["a", "b"] == 2
    cases = [{"id": str(i)} for i in range(4)]
    classes = bench.disagreement_classes(verdicts, cases, labels)
    assert [(p, n, c["id"]) for p, n, c in classes] == [((0, 1, 1), 1, "1"), ((1, 0, 0), 1, "2")]


def test_the_prime_rl_rule_reads_the_last_box_after_thinking_else_the_whole_text():
    assert bench._mathrubric_answer("<think>\\boxed{1}</think> so \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert bench._mathrubric_answer("the answer is 7") == "the answer is 7"
    assert bench.box_then_math_verify("so \\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert bench.box_then_math_verify("so \\boxed{52_9}", "52_8") == 1.0  # Math-Verify drops the base
