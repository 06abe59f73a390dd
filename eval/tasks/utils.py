"""Prompt building and per-problem scoring for the task YAMLs beside this file (lm-eval `!function` targets).

lm-eval loads this file by path, so it holds no logic of its own: prompts come from trainer/tasks/data.py (the exact
training instruction), grading from eval/answers.py (the training reward), the arithmetic from eval/mean_at_k.py.
"""

from __future__ import annotations

from eval.answers import grade
from eval.mean_at_k import problem_metrics
from trainer.tasks.data import FEW_SHOT, PROMPT_SUFFIX

# MMLU is graded on a letter, so the question says which one to box; the instruction after it is MATH's.
MMLU_INSTRUCTION = "\n\nAnswer with the letter of the correct option."


def keep_all(resps, docs):
    """The filter that keeps all k samples per document (lm-eval's default, take_first, keeps one)."""
    return [list(r) for r in resps]


def doc_to_text_math(doc: dict) -> str:
    return doc["problem"] + PROMPT_SUFFIX["math"]


def doc_to_text_mmlu(doc: dict) -> str:
    return doc["problem"] + MMLU_INSTRUCTION + PROMPT_SUFFIX["math"]


def doc_to_text_countdown(doc: dict) -> str:
    return doc["problem"] + PROMPT_SUFFIX["countdown"]


def doc_to_text_tiny(doc: dict) -> str:
    return doc["problem"] + PROMPT_SUFFIX["tiny"]


def _process(family: str, doc: dict, results: list, grader: str = "ours") -> dict[str, float]:
    samples = results[0]
    if isinstance(samples, str):  # a take_first filter slipped in: one sample would pass for k
        raise TypeError("process_results got one string, not the list of k samples; use the keep_all filter")
    graded = [grade(family, sample, doc, grader) for sample in samples]
    return problem_metrics([score for score, _ in graded], [answer for _, answer in graded])


def process_math(doc: dict, results: list) -> dict[str, float]:
    return _process("math", doc, results)


def process_mmlu(doc: dict, results: list) -> dict[str, float]:
    return _process("mmlu", doc, results)


def process_countdown(doc: dict, results: list) -> dict[str, float]:
    return _process("countdown", doc, results)


def process_tiny(doc: dict, results: list) -> dict[str, float]:
    return _process("tiny", doc, results)


# eval.grader other than ours: eval/taskfiles.py renders `process_results` as `<the task's>_<grader>`.
def process_math_hendrycks(doc: dict, results: list) -> dict[str, float]:
    return _process("math", doc, results, "hendrycks")


def process_math_math_verify(doc: dict, results: list) -> dict[str, float]:
    return _process("math", doc, results, "math_verify")


def process_tiny_hendrycks(doc: dict, results: list) -> dict[str, float]:
    return _process("tiny", doc, results, "hendrycks")


def process_tiny_math_verify(doc: dict, results: list) -> dict[str, float]:
    return _process("tiny", doc, results, "math_verify")


# Small sums (trainer/tasks/small_sums.py) are asked after two worked examples, as the trainer asks them: lm-eval
# renders these as earlier chat turns (fewshot_as_multiturn, which eval/shard_run.py sets with the chat template).
def doc_to_text_small_sums(doc: dict) -> str:
    return doc["problem"] + PROMPT_SUFFIX["small_sums"]


def small_sums_shots() -> list[dict]:
    return [{"problem": q, "reply": a} for q, a in FEW_SHOT["small_sums"]]


def process_small_sums(doc: dict, results: list) -> dict[str, float]:
    return _process("math", doc, results)


def process_small_sums_hendrycks(doc: dict, results: list) -> dict[str, float]:
    return _process("math", doc, results, "hendrycks")


def process_small_sums_math_verify(doc: dict, results: list) -> dict[str, float]:
    return _process("math", doc, results, "math_verify")
