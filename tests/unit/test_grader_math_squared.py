"""MATH^2's CSV header is published nowhere we could read (docs/evaluation.md "Tasks"), so its converter reads any of
the plausible names and, on a header it cannot map, names the columns it found and the fix."""

from __future__ import annotations

import pytest

from eval.prepare import math_squared_rows


@pytest.mark.parametrize("problem", ["problem", "question", "Problem", "Question", "prompt"])
@pytest.mark.parametrize("answer", ["answer", "Answer", "final_answer", "Final Answer", "gold"])
def test_every_plausible_pair_of_names_is_read(problem, answer):
    rows = math_squared_rows([{problem: "What is 3+4?", answer: "7"}])
    assert (rows[0]["problem"], rows[0]["answer"]) == ("What is 3+4?", "7")


@pytest.mark.parametrize("solution", ["solution", "Solution", "response"])
def test_without_an_answer_column_the_gold_is_the_solution_s_last_box(solution):
    assert math_squared_rows([{"question": "q", solution: "so \\boxed{2} then \\boxed{\\frac{1}{2}}"}])[0]["answer"] \
        == "\\frac{1}{2}"


def test_a_header_it_cannot_map_is_named_with_the_fix():
    with pytest.raises(ValueError) as err:
        math_squared_rows([{"Unnamed: 0": 0, "text": "q", "label": "7"}])
    assert "['Unnamed: 0', 'text', 'label']" in str(err.value)
    assert "map them in eval/prepare.py:math_squared_rows" in str(err.value)
