"""Benchmark: the graders' agreement with each other and with correctness labels, on real public files.

    nice -n 10 env OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/grader_agreement.py \\
        --math500 DIR/math500_test.jsonl --labelled DIR/math_cot_100.jsonl

Two inputs, read from the paths given (the files stay out of the repository; docs/evaluation.md "Graders: agreement
measured" names their sources):

- `--math500`: MATH500 in its original release schema, one JSON object a line with `problem`, `solution`,
  `answer`, `subject`, `level`, `unique_id`. Each grader grades (a) the reference solution against its own answer
  and (b) the answer in a box against itself: a grader that fails a reference rejects a right answer.
- `--labelled`: model outputs with reference answers and correctness labels, the schema of Qwen2.5-Math's
  evaluation output (one object a problem: `gt`, the gold answer; `code`, the k completions; `score`, one bool
  label each). Each grader grades every completion against the gold; its verdicts are tallied against the labels.

Beside the graders of trainer/tasks/rewards.py `GRADERS` (every one that runs here) stand two reference rules that
are no grader of ours, to place them: lm-eval's installed `hendrycks_math` `process_results` called as it is, and
the rule of Prime-RL's MATH environment (verifiers' MathRubric: the text after the last `</think>`, its last
`\\boxed{...}` or the whole text when there is none, then Math-Verify against the gold, both in a box), written here
from that rule. Output: markdown tables (references right; agreement with the labels, false positives and
negatives; pairwise agreement) and every disagreement class, one example each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from scipy.stats import binomtest  # noqa: E402

from trainer.tasks.rewards import GRADERS, last_boxed  # noqa: E402

Grade = Callable[[str, str], float]
MATH500_KEYS = ("problem", "solution", "answer", "subject", "level", "unique_id")
LABELLED_KEYS = ("gt", "code", "score")


# --- the files' schemas -----------------------------------------------------------------------------------

def math500_cases(rows: list[dict]) -> list[dict]:
    """The reference cases of MATH500 rows: each row's solution and its boxed answer, both against the answer."""
    cases = []
    for i, r in enumerate(rows):
        missing = [k for k in MATH500_KEYS if k not in r]
        if missing:
            raise ValueError(f"MATH500 row {i}: no {', '.join(missing)} (keys {sorted(r)}); the release schema "
                             f"has {', '.join(MATH500_KEYS)}")
        if not isinstance(r["level"], int):
            raise ValueError(f"MATH500 row {i}: level {r['level']!r} is not an int as in the release")
        cases.append({"id": r["unique_id"], "kind": "solution", "completion": r["solution"], "gold": r["answer"]})
        cases.append({"id": r["unique_id"], "kind": "boxed answer", "completion": f"\\boxed{{{r['answer']}}}",
                      "gold": r["answer"]})
    return cases


def labelled_cases(rows: list[dict]) -> list[dict]:
    """One case a completion: its gold, its text and its label (1 right, 0 wrong), from Qwen2.5-Math's schema."""
    cases = []
    for i, r in enumerate(rows):
        missing = [k for k in LABELLED_KEYS if k not in r]
        if missing:
            raise ValueError(f"labelled row {i}: no {', '.join(missing)} (keys {sorted(r)})")
        if len(r["code"]) != len(r["score"]):
            raise ValueError(f"labelled row {i}: {len(r['code'])} completions but {len(r['score'])} labels")
        for j, (text, label) in enumerate(zip(r["code"], r["score"])):
            if not isinstance(label, bool):
                raise ValueError(f"labelled row {i} completion {j}: label {label!r} is not a bool")
            cases.append({"id": f"{r.get('idx', i)}/{j}", "completion": text, "gold": str(r["gt"]),
                          "label": int(label)})
    return cases


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# --- the two reference rules ------------------------------------------------------------------------------

def lm_eval_hendrycks_math(completion: str, gold: str) -> float:
    """lm-eval's installed hendrycks_math task's own `process_results` (the answer between the first and last `$`
    of the completion), with the gold as the solution's box."""
    from lm_eval.tasks.hendrycks_math import utils  # noqa: PLC0415 - lm-eval is heavy, and only this rule needs it

    return float(utils.process_results({"solution": f"\\boxed{{{gold}}}"}, [completion])["exact_match"])


def _mathrubric_answer(text: str) -> str:
    text = text.split("</think>")[-1].strip()
    start = text.rfind("\\boxed{")
    if start < 0:
        return text
    depth, i = 1, start + len("\\boxed{")
    while i < len(text) and depth:
        depth += (text[i] == "{") - (text[i] == "}")
        i += 1
    return text[start + len("\\boxed{") : i - 1] if depth == 0 else text


def box_then_math_verify(completion: str, gold: str) -> float:
    """Prime-RL's MATH rule (verifiers' MathRubric): the last box (else the whole text), then Math-Verify."""
    from math_verify import parse, verify  # noqa: PLC0415 - ~0.4 s (sympy)

    answer = _mathrubric_answer(completion)
    if not answer:
        return 0.0
    try:
        return float(bool(verify(parse(f"\\boxed{{{gold}}}", parsing_timeout=5),
                                 parse(f"\\boxed{{{answer}}}", parsing_timeout=5), timeout_seconds=5)))
    except BaseException:  # noqa: BLE001 - Math-Verify's TimeoutException is a BaseException; the rule scores 0
        return 0.0


REFERENCE_RULES: dict[str, Grade] = {"lm-eval hendrycks_math": lm_eval_hendrycks_math,
                                     "box + Math-Verify (Prime-RL)": box_then_math_verify}


# --- the tally: pure ----------------------------------------------------------------------------------------

def grade_all(cases: list[dict], graders: dict[str, Grade]) -> dict[str, list[int]]:
    return {name: [int(grade(c["completion"], c["gold"]) == 1.0) for c in cases] for name, grade in graders.items()}


def against_labels(verdicts: dict[str, list[int]], labels: list[int]) -> dict[str, dict]:
    """Per grader: agreement with the labels (with its 95% Wilson interval), false positives and negatives."""
    out = {}
    for name, v in verdicts.items():
        agree = sum(a == b for a, b in zip(v, labels))
        ci = binomtest(agree, len(labels)).proportion_ci(method="wilson") if labels else None
        out[name] = {"agree": agree, "n": len(labels), "ci": (ci.low, ci.high) if ci else (0.0, 0.0),
                     "fp": sum(a and not b for a, b in zip(v, labels)),
                     "fn": sum(b and not a for a, b in zip(v, labels)), "right": sum(v)}
    return out


def pairwise(verdicts: dict[str, list[int]]) -> dict[tuple[str, str], int]:
    """How many cases each two graders give the same verdict."""
    names = list(verdicts)
    return {(a, b): sum(x == y for x, y in zip(verdicts[a], verdicts[b])) for a in names for b in names}


def disagreement_classes(verdicts: dict[str, list[int]], cases: list[dict],
                         labels: list[int] | None = None) -> list[tuple[tuple[int, ...], int, dict]]:
    """Every pattern of verdicts (and label, when given) that is not unanimous: (pattern, count, first case)."""
    columns = [*verdicts.values(), *([labels] if labels is not None else [])]
    patterns = list(zip(*columns))
    first: dict[tuple[int, ...], int] = {}
    for i, p in enumerate(patterns):
        first.setdefault(p, i)
    counts = Counter(patterns)
    return [(p, counts[p], cases[first[p]]) for p in sorted(counts, key=lambda p: -counts[p]) if len(set(p)) > 1]


# --- output ---------------------------------------------------------------------------------------------------

def _short(s: str | None, n: int = 60) -> str:
    s = "(none)" if s is None else " ".join(s.split())
    return (s if len(s) <= n else s[: n - 3] + "...").replace("|", "\\|")


def report(ref_verdicts, ref_cases, lab_verdicts, lab_cases) -> str:
    labels = [c["label"] for c in lab_cases]
    by_label = against_labels(lab_verdicts, labels)
    kinds = sorted({c["kind"] for c in ref_cases})
    n_ref = sum(c["kind"] == kinds[0] for c in ref_cases)
    lines = [f"| grader | {' | '.join(f'MATH500 {k} right' for k in kinds)} | agreement with labels (95% CI) "
             f"| false positives | false negatives | marked right (labels: {sum(labels)}) |",
             "|---|" + "---|" * (len(kinds) + 4)]
    for name in lab_verdicts:
        refs = [sum(v for v, c in zip(ref_verdicts[name], ref_cases) if c["kind"] == k) for k in kinds]
        s = by_label[name]
        lines.append(f"| {name} | {' | '.join(f'{r}/{n_ref}' for r in refs)} | {s['agree']}/{s['n']} "
                     f"({100 * s['agree'] / s['n']:.1f}%, {100 * s['ci'][0]:.1f}-{100 * s['ci'][1]:.1f}) "
                     f"| {s['fp']} | {s['fn']} | {s['right']} |")
    names = list(lab_verdicts)
    pairs = pairwise(lab_verdicts)
    lines += ["", f"Pairwise agreement on the {len(lab_cases)} labelled completions:", "",
              "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {a} | " + " | ".join(f"{100 * pairs[a, b] / len(lab_cases):.1f}%" for b in names) + " |"
              for a in names]
    for title, verdicts, cases, lab in (("MATH500 references", ref_verdicts, ref_cases, None),
                                        ("labelled completions", lab_verdicts, lab_cases, labels)):
        header = names + (["label"] if lab is not None else [])
        lines += ["", f"Disagreement classes, {title} (1 = right; one example each):", "",
                  "| " + " | ".join(header) + " | cases | example: gold | example: last box |",
                  "|" + "---|" * (len(header) + 3)]
        for pattern, count, case in disagreement_classes(verdicts, cases, lab):
            lines.append("| " + " | ".join(map(str, pattern)) + f" | {count} | `{_short(case['gold'])}` "
                         f"| `{_short(last_boxed(case['completion']))}` ({case['id']}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--math500", type=Path, required=True, help="MATH500 test.jsonl, original release schema")
    parser.add_argument("--labelled", type=Path, required=True,
                        help="labelled model outputs, Qwen2.5-Math evaluation schema (gt, code, score)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N rows of each file")
    args = parser.parse_args(argv)
    graders: dict[str, Grade] = {**GRADERS, **REFERENCE_RULES}
    ref_cases = math500_cases(read_jsonl(args.math500)[: args.limit])
    lab_cases = labelled_cases(read_jsonl(args.labelled)[: args.limit])
    start = time.perf_counter()
    ref_verdicts = grade_all(ref_cases, graders)
    lab_verdicts = grade_all(lab_cases, graders)
    print(report(ref_verdicts, ref_cases, lab_verdicts, lab_cases))
    print(f"\n{len(ref_cases)} reference and {len(lab_cases)} labelled cases x {len(graders)} rules "
          f"in {time.perf_counter() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
