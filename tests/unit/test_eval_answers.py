"""Answer checking at evaluation: the training reward's boxed rule on tricky cases, and MMLU letter extraction."""

from __future__ import annotations

import pytest

from eval.answers import grade, letter_of, mmlu_letter

# (completion, gold, expected score): the same rule as the training reward (trainer/tasks/rewards.py).
MATH_CASES = [
    ("so \\boxed{1,000}", "1000", 1.0),  # thousands separator
    ("so \\boxed{1000}", "1,000", 1.0),
    ("so \\boxed{1{,}000}", "1000", 1.0),
    ("so \\boxed{1,\\!000}", "1000", 1.0),  # MATH's own spelling
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),  # fraction vs decimal, via Math-Verify
    ("\\boxed{\\frac12}", "0.5", 1.0),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", 1.0),
    ("\\boxed{0.333}", "\\frac{1}{3}", 0.0),  # a rounded decimal is not the fraction
    ("\\boxed{5\\text{ cm}}", "5", 1.0),  # units
    ("\\boxed{5 \\mbox{ cm}}", "5", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{50\\%}", "50", 1.0),
    ("\\boxed{\\text{(B)}}", "B", 1.0),  # \text{}
    ("\\boxed{\\textbf{12}}", "12", 1.0),
    ("first \\boxed{3}, finally \\boxed{4}", "4", 1.0),  # several boxes: the last one counts
    ("first \\boxed{4}, finally \\boxed{3}", "4", 0.0),
    ("the answer is 4", "4", 0.0),  # no box scores 0
    ("\\boxed{4", "4", 0.0),  # a box cut off by the length budget
    ("\\boxed{x=4}", "4", 1.0),
    ("\\boxed{(1,2)}", "(1, 2)", 1.0),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{-7}", "7", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", MATH_CASES)
def test_math_grading(completion, gold, expected):
    assert grade("math", completion, {"answer": gold})[0] == expected


def test_the_voted_math_answer_is_the_normalised_last_box():
    assert grade("math", "\\boxed{3} then \\boxed{1,000}", {"answer": "1000"}) == (1.0, "1000")
    assert grade("math", "no box", {"answer": "1000"}) == (0.0, None)


def test_a_unit_inside_the_text_wrapper_is_dropped():
    assert grade("math", "\\boxed{\\text{5 cm}}", {"answer": "5"})[0] == 1.0


# (completion, expected letter): the box first, then "the answer is (X)" phrasings; capitals only.
LETTER_CASES = [
    ("The answer is (C)", "C"),
    ("So the answer is C.", "C"),
    ("Answer: B", "B"),
    ("**Answer: C**", "C"),
    ("Answer:(A)", "A"),
    ("The correct option is A", "A"),
    ("The answer is $\\text{(B)}$", "B"),
    ("The answer is \\textbf{D}", "D"),
    ("\\boxed{C}", "C"),
    ("\\boxed{(C)}", "C"),
    ("$\\boxed{\\text{C}}$", "C"),
    ("\\boxed{\\textbf{(D)}}", "D"),
    ("\\boxed{C. 42 m/s}", "C"),
    ("\\boxed{B)}", "B"),
    ("I first thought (B), but the correct answer is (D).", "D"),
    ("\\boxed{A} is what I get", "A"),
    ("the answer is a function of x", None),  # a lower-case article is no option
    ("answer is c", None),
    ("\\boxed{Cats}", None),
    ("no idea", None),
    ("", None),
]


@pytest.mark.parametrize("completion,expected", LETTER_CASES)
def test_mmlu_letter(completion, expected):
    assert mmlu_letter(completion) == expected


def test_a_boxed_option_text_maps_to_its_letter_when_the_choices_are_known():
    choices = ["10 m/s", "20 m/s", "30 m/s", "42 m/s"]
    assert mmlu_letter("\\boxed{42 m/s}", choices) == "D"
    assert mmlu_letter("\\boxed{42 m/s}") is None
    assert letter_of("\\text{20 m/s}", choices) == "B"


def test_mmlu_grading_compares_letters():
    doc = {"answer": "C", "choices": ["a", "b", "c", "d"]}
    assert grade("mmlu", "reasoning... \\boxed{C}", doc) == (1.0, "C")
    assert grade("mmlu", "reasoning... \\boxed{B}", doc) == (0.0, "B")
    assert grade("mmlu", "no letter at all", doc) == (0.0, None)


def test_tiny_and_countdown_grading():
    assert grade("tiny", "\\boxed{-12}", {"answer": "-12"}) == (1.0, "-12")
    entry = {"answer": "1+2*3", "metadata": {"numbers": [1, 2, 3], "target": 7}}
    assert grade("countdown", "<answer>1 + 2*3</answer>", entry) == (1.0, "1+2*3")
    assert grade("countdown", "\\boxed{(1+2)*3}", entry)[0] == 0.0  # 9, not 7
    assert grade("countdown", "\\boxed{7}", entry)[0] == 0.0  # the numbers must be used


def test_unknown_family():
    with pytest.raises(ValueError, match="valid: math, tiny, mmlu, countdown"):
        grade("gsm8k", "x", {})
