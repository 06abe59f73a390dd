"""The graders as a named choice (issue 55): the registry, the Hendrycks string equivalence against lm-eval's own
copy of it, and the property that a verdict follows the answer's value and not its formatting."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from trainer.config import graders as names
from trainer.tasks import hendrycks
from trainer.tasks.rewards import GRADERS, grader, reward_fn


def test_the_registry_holds_the_config_s_names_and_refuses_others_by_name():
    assert tuple(GRADERS) == names.GRADERS == ("ours", "hendrycks", "math_verify")
    with pytest.raises(ValueError, match="'minerva' cannot run in this environment.*antlr4"):
        grader("minerva")
    with pytest.raises(ValueError, match="valid: ours, hendrycks, math_verify"):
        grader("lenient")


def test_reward_fn_takes_the_grader_and_countdown_only_its_own():
    example = {"answer": "\\text{Evelyn}"}
    assert reward_fn("math", "ours")("\\boxed{Evelyn}", example) == 1.0
    assert reward_fn("math", "hendrycks")("\\boxed{Evelyn}", example) == 0.0  # the gold's format only
    assert reward_fn("tiny", "hendrycks")("\\boxed{ 3 }", {"answer": "3"}) == 1.0
    with pytest.raises(ValueError, match="reasoning-gym"):
        reward_fn("countdown", "hendrycks")


# The published algorithm's own cases: (answer, gold, equal).
HENDRYCKS = [
    ("\\frac12", "\\frac{1}{2}", True),
    ("0.5", "\\frac{1}{2}", True),
    ("1/2", "\\frac{1}{2}", True),
    ("\\dfrac{3}{4}", "\\frac34", True),
    ("5\\text{ cm}", "5", True),  # a unit, when the text starts with a space
    ("5\\text{cm}", "5", False),
    ("k = 7", "7", True),
    ("\\left( 1, 2 \\right)", "(1,2)", True),
    ("90^\\circ", "90", True),
    ("\\text{Evelyn}", "Evelyn", False),
    ("1,000", "1000", False),
    ("\\sqrt3", "\\sqrt{3}", True),
]


@pytest.mark.parametrize("answer, gold, equal", HENDRYCKS)
def test_hendrycks_equivalence(answer, gold, equal):
    assert hendrycks.equivalent(answer, gold) is equal


def test_hendrycks_extraction_is_the_published_one():
    assert hendrycks.last_boxed_answer("so \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert hendrycks.last_boxed_answer("\\boxed{1} then \\boxed{2}") == "2"
    assert hendrycks.last_boxed_answer("$\\boxed 42$ and more") == "42"
    assert hendrycks.last_boxed_answer("\\fbox{5}") is None  # found, never unwrapped: scores 0
    assert hendrycks.last_boxed_answer("no box") is None
    assert hendrycks.hendrycks_reward("\\boxed{2", "2") == 0.0


_LATEX = st.sampled_from(["\\frac", "\\dfrac", "\\sqrt", "\\left(", "\\right)", "\\text{ ", "\\text{", "}", "{",
                          "^\\circ", "^{\\circ}", "\\%", "\\$", " ", ".", "0", "1", "2", "7", "/", "=", "k", "x",
                          ",", "\\!", "\n", "-", "\\\\", "(", ")"])


# Derandomised and without shrinking: the same examples every run, and a failure reported as drawn (Math-Verify
# makes each example slow to shrink).
_QUICK = {"deadline": None, "derandomize": True, "phases": (Phase.explicit, Phase.generate),
          "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]}


@settings(max_examples=300, **_QUICK)
@given(st.lists(_LATEX, max_size=12).map("".join), st.lists(_LATEX, max_size=12).map("".join))
def test_hendrycks_agrees_with_lm_eval_s_copy_of_the_algorithm(a, b):
    """lm-eval ships the algorithm (lm_eval/tasks/hendrycks_math/utils.py); ours must give its verdict, except where
    lm-eval's `a/b` rewrite raises on a non-integer and verl's keeps the string (the module says so)."""
    lm = pytest.importorskip("lm_eval.tasks.hendrycks_math.utils")
    if any(len(s.split("/")) == 2 for s in (lm.strip_string(a) if _ok(lm, a) else a,
                                           lm.strip_string(b) if _ok(lm, b) else b)):
        return
    assert hendrycks.equivalent(a, b) == bool(lm.is_equiv(a, b))


def _ok(lm, s: str) -> bool:
    try:
        lm.strip_string(s)
    except Exception:
        return False
    return True


# A verdict follows the value: each gold below, written another way, is still right under every grader that claims
# that rewrite; changed in value, it is wrong under every grader.
SAME_VALUE = {
    # rewrite: the graders that hold it (hendrycks compares strings: it never claimed \text{} or spaces in words)
    "spaces": ("ours", "hendrycks", "math_verify"),
    "left_right": ("ours", "hendrycks", "math_verify"),
    "dfrac": ("ours", "hendrycks", "math_verify"),
    "text_word": ("ours", "math_verify"),
}


def _rewrite(kind: str, gold: str, spaces: int) -> str:
    if kind == "spaces":
        return ("," + " " * spaces).join(gold.split(",")) if "," in gold else " " * spaces + gold + " " * spaces
    if kind == "left_right":
        return gold.replace("(", "\\left(").replace(")", "\\right)")
    if kind == "dfrac":
        return gold.replace("\\frac", "\\dfrac")
    return f"\\text{{{gold}}}"


_INTS = st.integers(-999, 999)
_GOLDS = {
    "spaces": st.one_of(_INTS.map(str), st.tuples(_INTS, _INTS).map(lambda t: f"({t[0]},{t[1]})")),
    "left_right": st.tuples(_INTS, _INTS).map(lambda t: f"({t[0]},{t[1]})"),
    "dfrac": st.tuples(st.integers(1, 99), st.integers(2, 99)).map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
    "text_word": st.sampled_from(["Evelyn", "Tuesday", "even", "Devon", "Monica"]),
}


@pytest.mark.parametrize("kind", list(SAME_VALUE))
@settings(max_examples=25, **_QUICK)
@given(data=st.data())
def test_a_rewrite_that_keeps_the_value_keeps_the_verdict(kind, data):
    gold = data.draw(_GOLDS[kind])
    written = _rewrite(kind, gold, data.draw(st.integers(1, 3)))
    for name in SAME_VALUE[kind]:
        assert GRADERS[name](f"The answer is $\\boxed{{{written}}}$.", gold) == 1.0, (name, written, gold)


def _changed(kind: str, value: int, base: int) -> tuple[str, str]:
    if kind == "digit":
        return str(value), str(value + 1)
    if kind == "sign":
        return str(value), str(-value)
    if kind == "base":
        return f"{value}_{{{base}}}", f"{value}_{{{base + 1}}}"
    return f"{value}\\text{{ cm}}^2", f"{value}\\text{{ cm}}^3"


@pytest.mark.parametrize("kind", ["digit", "sign", "base", "power"])
@settings(max_examples=25, **_QUICK)
@given(value=st.integers(1, 777), base=st.integers(2, 8))
def test_a_change_of_value_changes_the_verdict(kind, value, base):
    gold, other = _changed(kind, value, base)
    # Math-Verify alone drops a base subscript and a unit's power (issue 55), which is why ours guards them; the
    # Hendrycks rule drops everything after "\text{ " (a unit, by its convention), the power with it.
    for name in {"base": ("ours", "hendrycks"), "power": ("ours",)}.get(kind, tuple(GRADERS)):
        assert GRADERS[name](f"\\boxed{{{gold}}}", gold) == 1.0, (name, gold)
        assert GRADERS[name](f"\\boxed{{{other}}}", gold) == 0.0, (name, other, gold)


def test_the_config_names_the_grader_and_refuses_what_cannot_run():
    from record.errors import ConfigError
    from trainer.config.run import DataConfig, EvalConfig

    assert DataConfig().grader == EvalConfig().grader == "ours"
    assert DataConfig(grader="hendrycks").grader == "hendrycks"
    with pytest.raises(ConfigError, match="data.grader: 'minerva' cannot run in this environment"):
        DataConfig(grader="minerva")
    with pytest.raises(ConfigError, match="reasoning-gym"):
        DataConfig(dataset="countdown", grader="math_verify")
    assert EvalConfig(grader="hendrycks").grader == "hendrycks"
    with pytest.raises(ConfigError, match="eval.grader: 'minerva' cannot run in this environment"):
        EvalConfig(grader="minerva")


def test_an_evaluation_s_settings_record_its_grader_only_where_it_is_not_ours():
    """The done markers written before eval.grader existed still count at `ours`; another grader evaluates again."""
    from eval.outcome import Settings

    ours = Settings(4, 1.0, 1.0, 64, True, (0,), "hf")
    assert "grader" not in ours.record()
    assert Settings(4, 1.0, 1.0, 64, True, (0,), "hf", None, "hendrycks").record()["grader"] == "hendrycks"
