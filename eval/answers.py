"""Answer extraction and grading for evaluation: the training rule (trainer/tasks/rewards.py) plus MMLU letters. Pure.

Each task family has one grader `(completion, doc) -> 0.0 | 1.0` and one extractor `(completion, doc) -> str | None`
(the normalised answer a sample votes for in maj@k). Math, MATH^2 and the tiny task use the training reward
unchanged: the last `\\boxed{}`, normalised, else Math-Verify. MMLU asks for the option letter in `\\boxed{}`;
`mmlu_letter` reads it from there first and from "the answer is (C)" phrasings second.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from trainer.tasks.rewards import (
    countdown_answer,
    countdown_reward,
    grader,
    last_boxed,
    math_reward,
    normalise,
    tiny_reward,
)

LETTERS = "ABCD"
_WRAPPED = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
# The letter alone, optionally in parentheses/brackets, optionally followed by its option text: "C", "(C)",
# "C)", "C.", "C: 42 m/s", "[C]". A bare word such as "Cats" is not a letter.
_LEADING_LETTER = re.compile(r"^[(\[]?\s*([A-D])\s*(?:[)\].:]|$|\s)")
# "the answer is (C)", "Answer: C", "correct option is C", "answer is $\boxed{C}$" was caught above; the letter
# must be a capital standing alone.
_ANSWER_PHRASE = re.compile(
    r"(?:answer|option|choice)\s*(?:is|would be|:)?\s*:?\s*(?:option\s*)?[($\[\s]*(?:\\text(?:bf)?\{)?[(\s]*"
    r"([A-D])\b(?![a-z])",
    flags=re.IGNORECASE,
)


def _strip_wrappers(text: str) -> str:
    s = text.strip().replace("$", "")
    for _ in range(3):
        s = _WRAPPED.sub(r"\1", s)
    return s.strip()


def letter_of(text: str, choices: Sequence[str] | None = None) -> str | None:
    """The option letter a short answer names: "C", "(C)", "\\text{(C)}", "C. 42"; or the letter of the option
    whose text it equals (normalised), when `choices` are given; else None."""
    s = _strip_wrappers(text)
    m = _LEADING_LETTER.match(s)
    if m:
        return m.group(1)
    if choices:
        target = normalise(s).lower()
        for letter, choice in zip(LETTERS, choices):
            if target and normalise(str(choice)).lower() == target:
                return letter
    return None


def mmlu_letter(completion: str, choices: Sequence[str] | None = None) -> str | None:
    """The answer letter of a multiple-choice completion: the last `\\boxed{}` if it names a letter, else the
    last "answer is (X)" phrase, else None."""
    boxed = last_boxed(completion)
    if boxed is not None:
        letter = letter_of(boxed, choices)
        if letter is not None:
            return letter
    # Upper-case letters only: "the answer is a function" must not read as option A.
    phrases = [m.group(1) for m in _ANSWER_PHRASE.finditer(completion) if m.group(1).isupper()]
    return phrases[-1] if phrases else None


def mmlu_reward(completion: str, doc: dict) -> float:
    """1.0 when the extracted letter is the gold letter `doc["answer"]`, else 0.0."""
    return 1.0 if mmlu_letter(completion, doc.get("choices")) == str(doc["answer"]).strip() else 0.0


def _boxed_normalised(completion: str, doc: dict) -> str | None:
    pred = last_boxed(completion)
    return normalise(pred) if pred is not None else None


def _countdown_normalised(completion: str, doc: dict) -> str | None:
    answer = countdown_answer(completion)
    return re.sub(r"\s+", "", answer) if answer else None


GRADERS: dict[str, Callable[[str, dict], float]] = {
    "math": lambda completion, doc: math_reward(completion, doc["answer"]),
    "tiny": lambda completion, doc: tiny_reward(completion, doc["answer"]),
    "mmlu": mmlu_reward,
    "countdown": countdown_reward,
}

EXTRACTORS: dict[str, Callable[[str, dict], str | None]] = {
    "math": _boxed_normalised,
    "tiny": _boxed_normalised,
    "mmlu": lambda completion, doc: mmlu_letter(completion, doc.get("choices")),
    "countdown": _countdown_normalised,
}


def grade(family: str, completion: str, doc: dict, grader_name: str = "ours") -> tuple[float, str | None]:
    """(score, voted answer) of one sample of a task of `family` (math, tiny, mmlu, countdown); a math or tiny
    answer scored by the grader `grader_name` (eval.grader; docs/evaluation.md "Graders"), the others by their own."""
    if family not in GRADERS:
        raise ValueError(f"unknown answer family {family!r}; valid: {', '.join(GRADERS)}")
    if grader_name != "ours" and family in ("math", "tiny"):
        return grader(grader_name)(completion, doc["answer"]), EXTRACTORS[family](completion, doc)
    return GRADERS[family](completion, doc), EXTRACTORS[family](completion, doc)
