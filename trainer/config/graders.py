"""The graders' names, the choices of `data.grader` (the training reward) and `eval.grader` (docs/evaluation.md
"Graders"). Names only: the run config sits below the tasks in the layers; trainer/tasks/rewards.py `GRADERS` maps
each name to its function, and holds exactly these names (it fails to import otherwise).
"""

from __future__ import annotations

# ours: the project's own (the last box, normalised, else Math-Verify with bases and unit powers kept);
# hendrycks: the Hendrycks MATH string equivalence, verl's default reward for MATH data and lm-eval's hendrycks_math;
# math_verify: the Math-Verify library alone, on the whole completion.
GRADERS = ("ours", "hendrycks", "math_verify")
DEFAULT = "ours"
# Named, so that asking for one says why instead of "unknown": never replaced by another grader in silence.
CANNOT_RUN_HERE = {
    "minerva": "lm-eval's minerva_math asserts antlr4-python3-runtime 4.11 (sympy's LaTeX parser) and hydra, which "
               "every entry point here uses, pins 4.9; the two cannot be installed together",
}


def grader_problems(p: list[str], path: str, value) -> None:
    """Append the problem with `value` as a grader name at `path`, if any."""
    if value in GRADERS:
        return
    if value in CANNOT_RUN_HERE:
        p.append(f"{path}: {value!r} cannot run in this environment ({CANNOT_RUN_HERE[value]}); "
                 f"valid: {', '.join(GRADERS)}")
    else:
        p.append(f"{path}: {value!r}; valid: {', '.join(GRADERS)} "
                 f"(cannot run here: {', '.join(CANNOT_RUN_HERE)})")
