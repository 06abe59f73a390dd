"""Training and validation prompts: local jsonl (or the tiny task, generated), a deterministic order, the prompt text.

Jobs on compute nodes never touch the network: datasets are local files written by `orchestrate data prepare`.
The batch at step s is a pure function of (seed, s), so resuming needs only the step, and every rank computes the
same batch and takes its own share.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from record.errors import UserError
from trainer.config.run import DataConfig
from trainer.tasks import fraction as fraction_task
from trainer.tasks import small_sums as small_sums_task
from trainer.tasks import tiny as tiny_task
from trainer.tasks.common import read_jsonl

# The instruction appended to each problem (verl's MATH recipe; the tiny model was warm-started with its own).
PROMPT_SUFFIX = {
    "math": " Let's think step by step and output the final answer within \\boxed{}.",
    "countdown": " Show your work, then give the final expression within \\boxed{}.",
    "tiny": "",
    "fractions": " Give the final answer within \\boxed{}.",
    "small_sums": "",  # its instruction is the worked examples below
}
# Worked examples shown before the problem as earlier (user, assistant) chat turns: a 135M instruct model copies a
# format it is shown where it ignores one it is told (docs/real-model.md).
FEW_SHOT = {"small_sums": small_sums_task.SHOTS}


class DataError(UserError, ValueError):
    """Missing or malformed data; the message says how to prepare it (the user's to fix: a job that finds it ends
    as a user error, never resubmitted)."""


# File names that `orchestrate data prepare` writes (eval/local_data.py), used when a path is not given.
DEFAULT_FILES = {("math", "train"): "math_train.jsonl", ("math", "test"): "math_test.jsonl",
                 ("math", "math500"): "math500.jsonl", ("countdown", "train"): "countdown_train.jsonl",
                 ("countdown", "test"): "countdown_heldout.jsonl"}


# Tasks generated inside the job, no files to prepare: dataset -> its module (SPLITS, make_split(split, n, seed)).
GENERATED = {"tiny": tiny_task, "fractions": fraction_task, "small_sums": small_sums_task}


# The data directory: where `orchestrate data prepare` writes, the jobs read and `orchestrate eval` looks. One rule,
# here (the lowest layer that reads it); the commands' help says it in DATA_DIR_RULE's words.
DATA_ENV = "COMEDY_DATA"
CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "data"  # the checkout's data/, wherever a command starts
DATA_DIR_RULE = f"${DATA_ENV}, else the checkout's data/ ({CHECKOUT_DATA})"


def data_dir() -> Path:
    """The data directory: DATA_DIR_RULE."""
    return Path(os.environ.get(DATA_ENV) or CHECKOUT_DATA)


def load_examples(cfg: DataConfig, split: str) -> list[dict]:
    """The examples of `split` ('train' or the validation split) as dicts with at least 'problem' and 'answer'."""
    path = cfg.train_path if split == "train" else cfg.val_path
    task = GENERATED.get(cfg.dataset)
    if task is not None and path is None:
        return task.make_split(split if split in task.SPLITS else "test", seed=0)
    if path is None and (cfg.dataset, split) in DEFAULT_FILES:
        path = str(data_dir() / DEFAULT_FILES[(cfg.dataset, split)])
    if path is None:
        raise DataError(f"data.{'train_path' if split == 'train' else 'val_path'} is not set for dataset "
                        f"{cfg.dataset!r} split {split!r}; run `orchestrate data prepare` and point it at the file")
    file = Path(path)
    if not file.exists():
        key = "data.train_path" if split == "train" else "data.val_path"
        raise DataError(f"{key}: {file} does not exist; run `orchestrate data prepare --out {file.parent}`, or set "
                        f"{key} in the sweep to the file (a sweep resolves it when submitted: launch it again)")
    rows = read_jsonl(file)
    bad = [i for i, r in enumerate(rows) if "problem" not in r or "answer" not in r]
    if not rows or bad:
        raise DataError(f"{file}: {len(bad)} of {len(rows)} rows lack 'problem'/'answer' (first: line {bad[0] + 1})"
                        if bad else f"{file} is empty")
    return rows


@dataclass
class PromptOrder:
    """A fresh permutation of the examples every epoch, seeded: batch(step) is pure in (seed, step)."""

    size: int
    seed: int

    def indices(self, step: int, batch: int) -> list[int]:
        out, start = [], step * batch
        while len(out) < batch:
            epoch, offset = divmod(start + len(out), self.size)
            perm = list(range(self.size))
            random.Random(f"{self.seed}:{epoch}").shuffle(perm)
            out.extend(perm[offset : offset + batch - len(out)])
        return out


def prompt_text(tokenizer, example: dict, dataset: str, chat_template: bool) -> str:
    """The exact text the policy is conditioned on: the dataset's worked examples if any, the problem, its
    instruction, and the chat template if on (the examples as earlier turns; without it, as lines before)."""
    content = example["problem"] + PROMPT_SUFFIX.get(dataset, "")
    shots = FEW_SHOT.get(dataset, ())
    if not chat_template:
        return "".join(f"{q}\n{a}\n\n" for q, a in shots) + content
    turns = [{"role": role, "content": text} for q, a in shots for role, text in (("user", q), ("assistant", a))]
    return tokenizer.apply_chat_template(turns + [{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)
