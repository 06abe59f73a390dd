"""The Hendrycks MATH string equivalence, the grader `hendrycks`: pure, `str -> float` (docs/evaluation.md "Graders").

The algorithm of Hendrycks et al.'s MATH release as verl computes it for MATH data by default
(verl/utils/reward_score/math_reward.py, `compute_score`) and lm-eval's hendrycks_math task with it (`is_equiv`),
written here from that published algorithm; neither library is a dependency. Three steps:

1. the answer is the last `\\boxed{...}` of the completion (when "\\boxed " with a space appears anywhere, the text
   after its last occurrence up to the next `$`); braces are counted without regard to `\\{`; no box, or an
   `\\fbox` only, scores 0;
2. both the answer and the gold go through the same string normalisation (`strip_string`);
3. they are right when the two strings are equal. Nothing is evaluated: `0.5` and `\\frac{1}{2}` are equal only
   because step 2 rewrites the one string "0.5", and `5\\text{ cm}` loses its unit only when the text starts with
   a space.

lm-eval's hendrycks_math differs in step 1: it takes the text between the completion's first and last `$`; and
where its `3/4` rewrite meets a non-integer (`\\sqrt{2}/2`) it compares raw strings, where verl's keeps the string:
this module follows verl, whose reward is the one that trained the paper's runs.
"""

from __future__ import annotations


def last_boxed_answer(text: str) -> str | None:
    """Step 1: the content of the last box, or None (no box, or one whose braces never close)."""
    if "\\boxed " in text:
        return text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] == "{") - (text[i] == "}")
        if text[i] == "}" and depth == 0:
            box = text[start : i + 1]
            # The published rule unwraps "\boxed{" only: an \fbox, or a box whose brace is not right after its
            # name, is no answer (verl's compute_score scores the failed unwrapping 0).
            return box[len("\\boxed{") : -1] if box.startswith("\\boxed{") else None
    return None


def _braced_fracs(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}`; `\\frac{a}b` is left as it is."""
    head, *rest = s.split("\\frac")
    out = head
    for part in rest:
        out += "\\frac"
        if not part:
            raise IndexError(s)  # "\\frac" at the end: the published rule fails here
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return s  # the published rule gives up on the whole string
        a, b, tail = part[0], part[1], part[2:]
        out += "{" + a + "}" + (b + tail if b == "{" else "{" + b + "}" + tail)
    return out


def _slash_as_frac(s: str) -> str:
    """`3/4` (two plain integers) -> `\\frac{3}{4}`; anything else unchanged."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _braced_sqrt(s: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}` (one character only)."""
    head, *rest = s.split("\\sqrt")
    if not all(rest):
        raise IndexError(s)  # "\\sqrt" at the end: the published rule fails here
    return head + "".join("\\sqrt" + (p if p.startswith("{") else "{" + p[:1] + "}" + p[1:]) for p in rest)


class _Unnormalisable(Exception):
    """The published normalisation fails on this string (several "\\text{ " units); equality falls back to raw."""


def strip_string(s: str) -> str:
    """Step 2, in the published order: each rewrite sees what the previous ones left."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    if "\\text{ " in s:  # a unit, by the release's convention: dropped with everything after it
        pieces = s.split("\\text{ ")
        if len(pieces) != 2:
            raise _Unnormalisable(s)
        s = pieces[0]
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 5" -> "5"
        s = sides[1]
    s = _braced_sqrt(s).replace(" ", "")
    s = _braced_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_as_frac(s)


def equivalent(answer: str, gold: str) -> bool:
    """Step 3: equal after normalisation; where normalising fails, equal as raw strings."""
    try:
        return strip_string(answer) == strip_string(gold)
    except (_Unnormalisable, IndexError):
        return answer == gold


def hendrycks_reward(completion: str, gold: str) -> float:
    """1.0 when the last boxed answer of `completion` is string-equivalent to `gold`, else 0.0."""
    answer = last_boxed_answer(completion)
    return 1.0 if answer is not None and equivalent(answer, gold) else 0.0
