"""The graders on the cases that trip answer checkers (docs/evaluation.md, "Tasks")."""

from __future__ import annotations

import threading

import pytest

from trainer.tasks.rewards import countdown_reward, last_boxed, math_reward, normalise, reward_fn, tiny_reward

LAST_BOXED = [
    ("the answer is \\boxed{42}.", "42"),
    ("first \\boxed{1}, then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # the last box counts
    ("\\boxed{a{b{c}}d}", "a{b{c}}d"),  # nested braces kept
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces are content
    ("\\boxed {3}", "3"),
    ("so $\\boxed 42$ it is", "42"),
    ("\\fbox{5}", "5"),
    ("\\boxed{}", ""),
    ("no box here: 42", None),
    ("\\boxed{2", None),  # truncated generation
    ("\\boxed{1} and \\boxed{2", None),  # an unclosed last box is not replaced by an earlier one
    ("\\boxedx{5}", None),  # another command, not a box
]


@pytest.mark.parametrize("text, expected", LAST_BOXED)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


MATH_CASES = [
    # (completion, gold, reward)
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{1000}", "1,000", 1.0),
    ("\\boxed{1,000,000}", "1000000", 1.0),
    ("\\boxed{1,2}", "12", 0.0),  # a pair, not a thousands separator
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac12}", "0.5", 1.0),
    ("\\boxed{0.333}", "\\frac{1}{3}", 0.0),
    ("\\boxed{\\text{5}}", "5", 1.0),
    ("\\boxed{5\\text{ cm}}", "5", 1.0),  # units
    ("\\boxed{5 \\text{cm}}", "5", 1.0),
    ("\\boxed{\\text{5 cm}}", "5", 1.0),  # the whole box is text
    ("\\boxed{\\text{5 cm}}", "6", 0.0),
    ("\\boxed{12\\text{ cm}^2}", "12", 1.0),
    ("\\boxed{3\\text{ or }4}", "3", 0.0),  # words between numbers are not a unit
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{10\\%}", "10", 1.0),
    ("\\boxed{7.}", "7", 1.0),  # trailing period
    ("\\boxed 7.", "7", 1.0),
    ("$\\boxed{7}$", "$7$", 1.0),  # dollar signs on either side
    ("\\boxed{7}", "\\boxed{7}", 1.0),  # a boxed gold is unboxed first
    ("\\boxed{\\left( 1, 2 \\right)}", "(1,2)", 1.0),
    ("\\boxed{1} so finally \\boxed{2}", "2", 1.0),  # several boxes: the last counts
    ("\\boxed{1} so finally \\boxed{2}", "1", 0.0),
    ("The answer is 5.", "5", 0.0),  # no box
    ("\\boxed{}", "", 0.0),
    ("\\boxed{}", "7", 0.0),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0),  # nested braces
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}", 1.0),  # equal, not string-equal
    ("\\boxed{-3}", "-3", 1.0),
    ("\\boxed{−3}", "-3", 1.0),  # unicode minus
    ("\\boxed{3}", "-3", 0.0),
    ("\\boxed{-3}", "3", 0.0),
    ("\\boxed{B}", "B", 1.0),
    ("\\boxed{A}", "B", 0.0),
    ("\\boxed{\\text{(B)}}", "B", 1.0),
    ("\\boxed{(C)}", "C", 1.0),
    ("\\boxed{\\text{five}}", "5", 0.0),
    ("\\boxed{2", "2", 0.0),  # truncated
]


@pytest.mark.parametrize("completion, gold, expected", MATH_CASES)
def test_math_reward(completion, gold, expected):
    assert math_reward(completion, gold) == expected


def test_math_reward_works_off_the_main_thread():
    # Math-Verify's signal-based timeout raises outside the main thread; the case needs Math-Verify (not
    # string-equal), so a swallowed error would show up as 0.0.
    result = {}
    worker = threading.Thread(target=lambda: result.update(r=math_reward("\\boxed{0.5}", "\\frac{1}{2}")))
    worker.start()
    worker.join(timeout=60)
    assert result == {"r": 1.0}


def test_normalise_never_merges_different_numbers():
    assert normalise("1,000") == normalise("1000")
    assert normalise("1,2") != normalise("12")
    assert normalise("-5") != normalise("5")
    assert normalise("0.5") != normalise("5")
    assert normalise("\\text{5 cm}") == normalise("5\\text{ cm}") == normalise("5") == "5"  # maj@k votes agree


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("\\boxed{46}", "46", 1.0),
        ("<|assistant|>\\boxed{ 46 }", "46", 1.0),
        ("\\boxed{-46}", "46", 0.0),
        ("\\boxed{-46}", "-46", 1.0),
        ("46", "46", 0.0),
        ("\\boxed{45}", "46", 0.0),
        ("\\boxed{}", "", 0.0),
    ],
)
def test_tiny_reward(completion, gold, expected):
    assert tiny_reward(completion, gold) == expected


# Target 164 from 66, 34, 98, 54, 6: reasoning-gym's countdown item 0 under seed 0.
COUNTDOWN_ENTRY = {"metadata": {"numbers": [66, 34, 98, 54, 6], "target": 164}}


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<answer>6*(98 - 54) - 34 - 66</answer>", 1.0),
        ("<answer>1</answer> no wait <answer> 6*(98-54)-34-66 </answer>", 1.0),  # the last tag counts
        ("\\boxed{6*(98 - 54) - 34 - 66}", 1.0),  # a box when there is no tag
        ("<answer>6*(98 - 54) - 34 - 66 = 164</answer>", 0.0),  # '=' is outside the format
        ("<answer>66 + 98</answer>", 0.0),  # right value, numbers unused: scorer's 0.05 is not correct
        ("<answer>6*(98 - 54) - 34 - 65</answer>", 0.0),
        ("<answer>9**9**9**9</answer>", 0.0),  # never reaches sympy
        ("<answer>__import__('os').getcwd()</answer>", 0.0),
        ("6*(98 - 54) - 34 - 66", 0.0),  # no tag, no box
        ("", 0.0),
    ],
)
def test_countdown_reward(completion, expected):
    assert countdown_reward(completion, COUNTDOWN_ENTRY) == expected


def test_countdown_reward_accepts_reasoning_gym_reference_answers():
    import reasoning_gym

    dataset = reasoning_gym.create_dataset("countdown", seed=0, size=5)
    for entry in dataset:
        assert countdown_reward(f"<answer>{entry['answer']}</answer>", entry) == 1.0
        assert countdown_reward(f"<answer>{entry['answer']}+1</answer>", entry) == 0.0


def test_reward_fn_dispatch():
    assert reward_fn("math")("\\boxed{1/2}", {"answer": "0.5"}) == 1.0
    assert reward_fn("tiny")("\\boxed{3}", {"answer": "3"}) == 1.0
    assert reward_fn("countdown")("<answer>6*(98-54)-34-66</answer>", COUNTDOWN_ENTRY) == 1.0
    with pytest.raises(ValueError, match="valid: math, tiny, countdown"):
        reward_fn("gsm8k")


# Issue 55's three defects, each a real answer to a MATH500 problem: (completion, gold, right).
DEFECTS = [
    # The unit rule stripped the prediction's text and not the gold's.
    ("\\boxed{4:30 \\text{ p.m.}}", "\\text{4:30 p.m.}", 1.0),
    ("\\boxed{\\frac{270}7\\text{ degrees}.}", "\\frac{270}7\\text{ degrees}", 1.0),
    ("\\boxed{4:30 \\text{ a.m.}}", "\\text{4:30 p.m.}", 0.0),  # the fix must not drop the words that matter
    # Math-Verify drops a base subscript.
    ("\\boxed{52_9}", "52_8", 0.0),
    ("\\boxed{52_8}", "52_8", 1.0),
    ("\\boxed{52_{8}}", "52_8", 1.0),
    # ... and a unit's power.
    ("\\boxed{864 \\mbox{ inches}^3}", "864 \\mbox{ inches}^2", 0.0),
    ("\\boxed{864 \\mbox{ inches}^2}", "864 \\mbox{ inches}^2", 1.0),
    ("\\boxed{864}", "864 \\mbox{ inches}^2", 1.0),  # a unit left out is not a wrong unit
]


@pytest.mark.parametrize("completion, gold, expected", DEFECTS)
def test_issue_55_defects(completion, gold, expected):
    assert math_reward(completion, gold) == expected
