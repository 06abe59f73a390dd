"""Answer extraction and grading: `str -> float`, pure (CONTRIBUTING.md rule 1).

One rule for training reward and evaluation alike (docs/evaluation.md, "Tasks"): take the LAST `\\boxed{}`
of the completion (no box scores 0), normalise it and the gold answer, and compare; only when the strings differ
ask Math-Verify whether the two are mathematically equal (`\\frac{1}{2}` vs `0.5`, `5\\text{ cm}` vs `5`), except
where both name a base or both a unit power and those differ (Math-Verify drops them: `52_9` is not `52_8`). That is
the grader `ours`; `GRADERS` names it beside the Hendrycks string equivalence (trainer/tasks/hendrycks.py) and
Math-Verify alone, the choices of `data.grader` and `eval.grader` (docs/evaluation.md "Graders").
Countdown is graded by reasoning-gym's own scorer, and only its full score 1.0 counts as correct.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable

from trainer.config import graders as grader_names
from trainer.tasks.hendrycks import hendrycks_reward

# Math-Verify's timeout is signal.alarm, which raises outside the main thread (Ray, thread-pool reward
# workers). There we disable it and bound the work instead: sympy only ever sees a short string.
_VERIFY_TIMEOUT_S = 5
_MAX_VERIFY_CHARS = 300

_BOX_START = re.compile(r"\\(boxed|fbox)(?![A-Za-z])")
_TEXT_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
# A unit after a number that is the whole answer, inside or after a text wrapper: "5\text{ cm}", "\text{5 cm}",
# "\frac{270}7\text{ degrees}.". Only after a whole number: in "4:30\text{ p.m.}" the words are part of the value,
# and they stay on both sides (issue 55: the rule once stripped them from the prediction and not from the gold).
_UNIT = r"[A-Za-z][A-Za-z\s/^\d.]*"
_NUMBER = r"-?(?:\d[\d,]*(?:\.\d+)?|\\frac\{-?\d+\}(?:\{\d+\}|\d))"
_WRAPPER = r"\\(?:text|textrm|mathrm|mbox)\s*\{\s*"
_UNIT_AFTER = re.compile(r"^\s*(" + _NUMBER + r")\s*" + _WRAPPER + _UNIT + r"\}[\s.]*$")
_UNIT_INSIDE = re.compile(r"^\s*" + _WRAPPER + r"(" + _NUMBER + r")\s+" + _UNIT + r"\}[\s.]*$")
# What Math-Verify drops and the value keeps (issue 55): a base subscript ("52_8"; digits, or A-F for bases above
# 10) and the power of a unit ("864\mbox{ inches}^2", "\text{ cm^3}").
_BASE = re.compile(r"(?<![A-Za-z\\])[0-9A-F]+_\{?\s*(\d+)\s*\}?")
_UNIT_POWER = re.compile(r"\\(?:text|textrm|mathrm|mbox)\s*\{([^{}]*[A-Za-z][^{}]*)\}(?:\s*\^\s*\{?\s*(\d+))?")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
# A whitelist before sympy's parse_expr (it evals Python); "**" is out because 9**9**9**9 never returns.
_COUNTDOWN_EXPR = re.compile(r"[0-9+\-*/() ]{1,200}")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` / `\\fbox{...}` (nested braces kept), or None when there is none.

    `\\boxed 42` (no braces) gives the next whitespace/`$`-delimited word. A last box whose braces never close
    (a truncated generation) gives None: an earlier box is not the final answer.
    """
    matches = list(_BOX_START.finditer(text))
    if not matches:
        return None
    i = matches[-1].end()
    spaced = re.match(r" *\{", text[i:])  # "\boxed {x}" is the same box as "\boxed{x}"
    i += spaced.end() - 1 if spaced else 0
    if i >= len(text) or text[i] != "{":
        word = re.match(r"\s+([^\s$]+)", text[i:])
        return word.group(1) if word else None
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2  # an escaped \{ or \} is content, not structure
            continue
        depth += (c == "{") - (c == "}")
        if depth == 0:
            return text[i + 1 : j]
        j += 1
    return None


def normalise(answer: str) -> str:
    """A canonical string for exact matching; never makes two different numbers equal."""
    s = answer.strip().replace("−", "-").replace("$", "").replace("{,}", ",")
    s = re.sub(r"\\(left|right)(?![A-Za-z])", "", s)
    s = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", s)
    s = _UNIT_INSIDE.sub(r"\1", _UNIT_AFTER.sub(r"\1", s))
    for _ in range(3):  # unwrap \text{\textbf{..}} from the inside out
        s = _TEXT_WRAPPERS.sub(r"\1", s)
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s).replace("\\%", "").replace("%", "")
    s = re.sub(r"\\[,;:! ]", "", s)  # LaTeX spacing commands
    s = re.sub(r"\s+", "", s).rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    letter = re.fullmatch(r"\(([A-Z])\)", s)  # multiple choice "(B)" is "B"
    return letter.group(1) if letter else s


def _gold_text(gold: str) -> str:
    boxed = last_boxed(gold) if "\\boxed" in gold or "\\fbox" in gold else None
    return (boxed if boxed is not None else gold).strip().strip("$")


def _kept_apart(gold: str, pred: str) -> bool:
    """True when both answers name a base, or both a unit, and those differ: equal numbers, different values."""
    bases = [sorted(_BASE.findall(s)) for s in (gold, pred)]
    if all(bases) and bases[0] != bases[1]:
        return True
    powers = [sorted(_unit_powers(s)) for s in (gold, pred)]
    return all(powers) and powers[0] != powers[1]


def _unit_powers(answer: str) -> list[str]:
    found = []
    for inside, after in _UNIT_POWER.findall(answer):
        power = re.search(r"\^\s*\{?\s*(\d+)", inside)
        found.append(after or (power.group(1) if power else "1"))
    return found


def _math_verify_equal(gold: str, pred: str) -> bool:
    # Not at the top: ~0.4 s (sympy), and `orchestrate sweep` imports this module on the login node (through
    # trainer/model/tiny_model.py), whose tiny task never needs Math-Verify.
    from math_verify import parse, verify  # noqa: PLC0415
    from math_verify.errors import TimeoutException  # noqa: PLC0415

    if len(gold) > _MAX_VERIFY_CHARS or len(pred) > _MAX_VERIFY_CHARS:
        return False
    timeout = _VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        # Math-Verify only extracts LaTeX inside an environment, so both sides go in a box.
        gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout)
        pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=timeout)
        return bool(gold_parsed) and bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except (Exception, TimeoutException):  # TimeoutException is a BaseException
        return False


def math_reward(completion: str, gold: str) -> float:
    """1.0 when the last boxed answer of `completion` equals `gold` (normalised, else per Math-Verify), else 0.0.

    `gold` is a bare answer (`\\frac{1}{2}`, `1000`, `B`); a `$...$` or `\\boxed{}` around it is removed first.
    """
    pred = last_boxed(completion)
    if pred is None:
        return 0.0
    gold = _gold_text(gold)
    if normalise(pred) == normalise(gold) and normalise(gold) != "":
        return 1.0
    return 1.0 if not _kept_apart(gold, pred) and _math_verify_equal(gold, pred) else 0.0


def tiny_reward(completion: str, gold: str) -> float:
    """The synthetic task's reward: last box, normalised, string-equal (its answers are plain integers).

    No Math-Verify on this path: it is the hot loop of every CPU run, and for integers the string rule is exact.
    """
    pred = last_boxed(completion)
    return 1.0 if pred is not None and normalise(pred) == normalise(_gold_text(gold)) != "" else 0.0


@functools.lru_cache(maxsize=1)
def _countdown_scorer() -> Callable[[str, dict], float]:
    # ~1 s: it imports every reasoning-gym task, and only Countdown's grader needs it.
    import reasoning_gym  # noqa: PLC0415

    return reasoning_gym.get_score_answer_fn("countdown")


def countdown_answer(completion: str) -> str | None:
    """The last `<answer>...</answer>` (reasoning-gym's convention), else the last boxed answer."""
    tagged = re.findall(r"<answer>\s?(.*?)\s?</answer>", completion, flags=re.DOTALL)
    answer = tagged[-1] if tagged else last_boxed(completion)
    return answer.strip() if answer is not None else None


def countdown_reward(completion: str, entry: dict) -> float:
    """1.0 when the answer uses every number of `entry["metadata"]["numbers"]` once and hits its target, else 0.0.

    reasoning-gym's scorer gives 0.01/0.05 for malformed/wrong answers; those count as wrong (accuracy = score 1.0).
    """
    answer = countdown_answer(completion)
    if answer is None or not _COUNTDOWN_EXPR.fullmatch(answer) or "**" in answer:
        return 0.0
    return 1.0 if _countdown_scorer()(answer, entry) == 1.0 else 0.0


def math_verify_reward(completion: str, gold: str) -> float:
    """Math-Verify alone (the grader `math_verify`): the library's own extraction from the whole completion (its
    LaTeX and plain-expression rules, a boxed answer first) against the gold in a box; nothing of ours between."""
    from math_verify import parse, verify  # noqa: PLC0415 - ~0.4 s (sympy), as in _math_verify_equal
    from math_verify.errors import TimeoutException  # noqa: PLC0415

    timeout = _VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = parse(f"\\boxed{{{_gold_text(gold)}}}", parsing_timeout=timeout)
        pred_parsed = parse(completion, parsing_timeout=timeout)
        return 1.0 if gold_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=timeout) else 0.0
    except (Exception, TimeoutException):  # TimeoutException is a BaseException
        return 0.0


# The graders of a math answer, by name (trainer/config/graders.py names them; docs/evaluation.md "Graders"):
# `(completion, gold answer) -> 0.0 | 1.0`.
GRADERS: dict[str, Callable[[str, str], float]] = {
    "ours": math_reward,
    "hendrycks": hendrycks_reward,
    "math_verify": math_verify_reward,
}
if tuple(GRADERS) != grader_names.GRADERS:
    raise ImportError(f"GRADERS {tuple(GRADERS)} differ from trainer/config/graders.py's {grader_names.GRADERS}")


def grader(name: str) -> Callable[[str, str], float]:
    """The grader called `name`; a ValueError naming the choices, and why one that cannot run here does not."""
    if name not in GRADERS:
        problems: list[str] = []
        grader_names.grader_problems(problems, "grader", name)
        raise ValueError(problems[0])
    return GRADERS[name]


def _with(grade: Callable[[str, str], float]) -> Callable[[str, dict], float]:
    return lambda completion, example: grade(completion, example["answer"])


def reward_fn(task: str, grader_name: str = grader_names.DEFAULT) -> Callable[[str, dict], float]:
    """The `(completion, example) -> float` reward of a dataset family under a grader (`data.grader`).

    Every family but Countdown has a math answer and takes any grader; the tiny task's `ours` is `tiny_reward`
    (the same verdicts on its integer answers, without Math-Verify in the CPU runs' hot loop). Countdown is graded
    by reasoning-gym's own scorer and takes `ours` only."""
    families = ("math", "tiny", "countdown", "fractions", "small_sums")
    if task not in families:
        raise ValueError(f"unknown reward task {task!r}; valid: {', '.join(families)}")
    grade = grader(grader_name)
    if task == "countdown":
        if grader_name != grader_names.DEFAULT:
            raise ValueError(f"countdown is graded by reasoning-gym's scorer; grader {grader_name!r} grades math "
                             f"answers (set it to {grader_names.DEFAULT!r})")
        return countdown_reward
    if task == "tiny" and grader_name == grader_names.DEFAULT:
        return _with(tiny_reward)
    return _with(grade)  # fractions: Math-Verify on the path; small_sums: `3/2` for \frac{3}{2}
