"""The checks a training job makes at its start that need only the tokenizer, the model's config and the data, made
on the login node before anything is queued: a mistake found there costs a second, not two queue waits per cell.

- the prompt budget under the chat template (trainer/tasks/budget.py, the job's own function): the template's fixed
  part against rollout.max_prompt_tokens, and a line where the longest problem's prompt would be cut at its start;
- the dataset's schema (trainer/tasks/data.py `load_examples`, the job's own reader): every row has problem/answer;
- with the vLLM engine, the model's context (config.json's max_position_embeddings) against the prompt plus the
  response budget (trainer/rollout/vllm_support.py `length_problem`, what the job's engine checks).

Once per distinct model (one tokenizer load each) and data. Where only the job can read the model (a hub id in the
cluster's cache, SmolLM2 not fetched here, a GGUF file not converted) a line says the check is left to the job; a
job that finds the mistake ends as `user_error` and is never resubmitted (orchestrator/watch/watcher.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from record.errors import UserError
from trainer.config.run import TINY_MODEL
from trainer.model.source import local_dir
from trainer.rollout.vllm_support import length_problem
from trainer.tasks.budget import longest_prompt, prompt_budget_problems
from trainer.tasks.data import load_examples

_TOKENIZERS: dict[tuple[str, str], object] = {}  # (name, directory) -> tokenizer, or the reason there is none


def job_start_report(sweep) -> tuple[list[str], list[str]]:
    """The lines to print and the problems (each with its fix and the cells it concerns)."""
    lines, problems, seen, examples = [], [], {}, {}
    for cell in sweep.cells:
        c = cell.config
        key = (c.model.name_or_path, c.model.chat_template, c.data, c.rollout.max_prompt_tokens,
               c.rollout.max_response_tokens if c.rollout.engine == "vllm" else None)
        seen.setdefault(key, []).append(cell.name)
    for (name, chat, data, budget, response), cells in seen.items():
        where = f" ({len(cells)} cell(s): {', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''})"
        rows = examples.get(data)
        if rows is None:
            rows = examples[data] = _examples(data, lines, problems)
        tokenizer = _tokenizer(name)
        if isinstance(tokenizer, str):
            note = f"model {name}: {tokenizer}; its prompt budget is left to the job, which checks it at its start"
            if note not in lines:
                lines.append(note)
        else:
            found = prompt_budget_problems(name, chat, data.dataset, budget, tokenizer)
            problems += [p + where for p in found]
            if not found and rows:
                longest = longest_prompt(tokenizer, rows, data.dataset, chat)
                if longest > budget:
                    lines.append(f"warning: the longest {data.dataset} training problem's prompt takes {longest} "
                                 f"tokens with {name}'s template, over rollout.max_prompt_tokens={budget}: such "
                                 f"prompts lose their start (left truncation){where}")
        if response is not None:
            problem = length_problem(_max_positions(name), budget + response)
            problems += [f"rollout.engine=vllm with {name}: {problem}{where}"] if problem else []
    return lines, problems


def _tokenizer(name: str):
    """The model's tokenizer as the job loads it, or why this node cannot read it (a string)."""
    directory = local_dir(name)
    key = (name, str(directory))
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = _load(name, directory)
    return _TOKENIZERS[key]


def _load(name: str, directory: Path | None):
    from transformers import AutoTokenizer  # noqa: PLC0415 (only where a sweep is checked, never for --help)

    if name == TINY_MODEL:
        from trainer.model.tiny_model import build_tokenizer  # noqa: PLC0415 (torch)

        return build_tokenizer()
    try:
        if directory is not None:
            return AutoTokenizer.from_pretrained(str(directory))
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:  # noqa: BLE001 - anything transformers raises: the job has its own cache, or fails itself
        return ("not readable on this node (a hub id not in its Hugging Face cache, or a model not fetched or "
                "converted here)") if directory is None else f"no tokenizer readable in {directory}"


def _examples(data, lines: list[str], problems: list[str]) -> list[dict]:
    """The training split as the job reads it; a schema problem is one problem, a file not here one line."""
    try:
        return load_examples(data, "train")
    except UserError as err:
        missing = "does not exist" in str(err) or "is not set" in str(err)
        (lines if missing else problems).append(f"data {data.dataset}: {err}" + (
            "; its schema and longest problem are checked once it is there" if missing else ""))
        return []


def _max_positions(name: str) -> int | None:
    directory = local_dir(name)
    try:
        return int(json.loads((directory / "config.json").read_text())["max_position_embeddings"])
    except (TypeError, OSError, KeyError, ValueError):
        return None
