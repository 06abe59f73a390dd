"""The small-sums task (trainer/tasks/small_sums.py): deterministic, disjoint splits, graded right by the training
reward, and prompted with its worked examples as earlier chat turns."""

from fractions import Fraction

from trainer.config.run import DataConfig
from trainer.tasks import small_sums as task
from trainer.tasks.common import latex
from trainer.tasks.data import load_examples, prompt_text
from trainer.tasks.rewards import reward_fn


def _value(problem: str) -> Fraction:
    """The problem's value, computed here independently of the generator: `Compute -4 - (-1).` -> -3."""
    a, op, b = problem.removeprefix("Compute ").removesuffix(".").split(" ")
    return Fraction(a) + (1 if op == "+" else -1) * Fraction(b.strip("()"))


def test_deterministic_given_seed_and_splits_disjoint():
    assert task.make_split("train", 50, seed=3) == task.make_split("train", 50, seed=3)
    assert task.make_split("train", 50, seed=3) != task.make_split("train", 50, seed=4)
    train = {e["problem"] for e in task.make_split("train")}
    test = {e["problem"] for e in task.make_split("test")}
    assert len(test) >= 64 and len(train) > 5 * len(test) and not train & test
    assert not {q for q, _ in task.SHOTS} & (train | test)  # a shot's answer is in the prompt


def test_gold_is_the_value_and_goes_beyond_positive_integers():
    examples = task.make_split("train") + task.make_split("test")
    assert all(Fraction(e["answer"].replace("\\frac{", "").replace("}{", "/").rstrip("}")) == _value(e["problem"])
               for e in examples)
    answers = [e["answer"] for e in examples]
    assert any(a.startswith("-") and a[1:].isdigit() for a in answers)
    assert any(a.startswith("\\frac") for a in answers)


def test_training_reward_grades_gold_right_and_wrong_answers_wrong():
    grade = reward_fn("small_sums")
    tested = [e for e in task.make_split("test") if "/" in e["problem"]][:10] + task.make_split("test", 20, seed=1)
    for e in tested:
        value = _value(e["problem"])
        assert grade(f"\\boxed{{{e['answer']}}}", e) == 1.0
        assert grade(f"\\boxed{{{value.numerator}/{value.denominator}}}", e) == 1.0  # the shot's form: Math-Verify
        assert grade(f"\\boxed{{{latex(value + 1)}}}", e) == 0.0
        assert grade(f"\\boxed{{{latex(-value)}}}", e) == (1.0 if value == 0 else 0.0)  # the sign counts
        assert grade(e["answer"], e) == 0.0  # no box, no reward


class _Template:
    """Records the messages it is asked to render (the real template is the model's; this checks the turns)."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return repr(messages)


def test_prompt_shows_the_worked_examples_as_earlier_turns():
    example = task.make_split("test", 1)[0]
    messages = eval(prompt_text(_Template(), example, "small_sums", True))  # noqa: S307 (our own repr)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in messages[:4]] == [t for shot in task.SHOTS for t in shot]
    assert messages[-1] == {"role": "user", "content": example["problem"]}
    plain = prompt_text(None, example, "small_sums", False)
    assert plain.startswith(task.SHOTS[0][0]) and plain.endswith(example["problem"])
    assert len(eval(prompt_text(_Template(), example, "fractions", True))) == 1  # noqa: S307 (no shots there)


def test_sweep_can_name_it():
    assert load_examples(DataConfig(dataset="small_sums"), "test") == task.make_split("test")
