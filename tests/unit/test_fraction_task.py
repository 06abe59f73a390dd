"""The fraction task (trainer/tasks/fraction.py): deterministic, disjoint splits, graded by the training reward."""

from fractions import Fraction

from trainer.config.run import DataConfig
from trainer.tasks import fraction as fraction_task
from trainer.tasks.common import latex
from trainer.tasks.data import load_examples
from trainer.tasks.rewards import reward_fn


def test_deterministic_given_seed_and_splits_disjoint():
    assert fraction_task.make_split("train", 50, seed=3) == fraction_task.make_split("train", 50, seed=3)
    assert fraction_task.make_split("train", 50, seed=3) != fraction_task.make_split("train", 50, seed=4)
    train = {e["problem"] for e in fraction_task.make_split("train")}
    test = {e["problem"] for e in fraction_task.make_split("test")}
    assert test and train and not train & test


def test_answers_go_beyond_positive_integers():
    answers = [e["answer"] for e in fraction_task.make_split("train")]
    assert any(a.startswith("-\\frac") for a in answers)
    assert any(a.startswith("\\frac") for a in answers)
    assert any(a.lstrip("-").isdigit() for a in answers)


def test_training_reward_grades_right_answers_correct_and_wrong_ones_wrong():
    grade = reward_fn("fractions")
    for e in fraction_task.make_split("test", 40, seed=1):
        value = Fraction(e["problem"].split()[1]) + (1 if e["problem"].split()[2] == "+" else -1) * Fraction(
            e["problem"].split()[3])
        assert grade(f"so \\boxed{{{e['answer']}}}", e) == 1.0
        assert grade(f"\\boxed{{{value.numerator}/{value.denominator}}}", e) == 1.0  # Math-Verify's path
        assert grade(f"\\boxed{{{latex(value + 1)}}}", e) == 0.0
        assert grade(e["answer"], e) == 0.0  # no box, no reward


def test_sweep_can_name_it():
    cfg = DataConfig(dataset="fractions")
    assert load_examples(cfg, "test") == fraction_task.make_split("test")
