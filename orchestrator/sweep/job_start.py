"""The checks a training job makes at its start that need only the tokenizer, the model's config and the data, made
on the login node before anything is queued: a mistake found there costs a second, not two queue waits per cell.

- the prompt budget under the chat template (trainer/tasks/budget.py, the job's own two functions): the template's
  fixed part against rollout.max_prompt_tokens, and a line where the longest problem's prompt would be cut at its
  start;
- the dataset's schema (trainer/tasks/data.py `load_examples`, the job's own reader): every row has problem/answer;
- with the vLLM engine, the model's context (config.json's max_position_embeddings) against the prompt plus the
  response budget (trainer/rollout/vllm_support.py `length_problem`, what the job's engine checks).

Once per distinct model and data. The counts (`Measured`) are kept in `<COMEDY_CACHE>/job-start/`, keyed by what they
depend on (the model's tokenizer files, the data file, the code that writes prompts), so a second `validate`, dry
run or submission reads a small file instead of loading transformers and a tokenizer (seconds). Where only the job
can read the model (a hub id not in this node's cache, SmolLM2 not fetched here, a GGUF file not converted) a line
says the check is left to the job; a job that finds the mistake ends as `user_error` and is never resubmitted
(orchestrator/watch/watcher.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from orchestrator.cluster.paths import hub_snapshot
from record.errors import UserError
from record.files import atomic_write
from trainer.config.run import TINY_MODEL
from trainer.model.cache_lock import comedy_cache
from trainer.model.source import local_dir
from trainer.rollout.vllm_support import length_problem
from trainer.tasks.budget import Measured, measure, prompt_budget_problems
from trainer.tasks.data import load_examples

PROMPT_CODE = ("trainer/tasks", "trainer/model/tiny_model.py")  # what writes a prompt: a change measures again
WEIGHTS = (".safetensors", ".bin", ".pt", ".gguf")  # a tokenizer's count does not depend on these


def job_start_report(sweep) -> tuple[list[str], list[str]]:
    """The lines to print and the problems (each with its fix and the cells it concerns)."""
    lines, problems, seen = [], [], {}
    for cell in sweep.cells:
        c = cell.config
        key = (c.model.name_or_path, c.model.chat_template, c.data, c.rollout.max_prompt_tokens,
               c.rollout.max_response_tokens if c.rollout.engine == "vllm" else None)
        seen.setdefault(key, []).append(cell.name)
    for (name, chat, data, budget, response), cells in seen.items():
        where = f" ({len(cells)} cell(s): {', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''})"
        found = _measured(name, chat, data)
        if isinstance(found, str):  # why it cannot be measured here
            note = f"model {name}: {found}"
            if note not in lines:
                lines.append(note)
        else:
            measured, data_note, data_problem = found
            for words, into in ((data_note, lines), (data_problem, problems)):
                if words and words not in into:
                    into.append(words)
            budget_problems = prompt_budget_problems(name, chat, data.dataset, budget, measured)
            problems += [p + where for p in budget_problems]
            if not budget_problems and measured.longest > budget:
                lines.append(f"warning: the longest {data.dataset} training problem's prompt takes {measured.longest} "
                             f"tokens with {name}'s template, over rollout.max_prompt_tokens={budget}: such "
                             f"prompts lose their start (left truncation){where}")
        if response is not None:
            problem = length_problem(_max_positions(name), budget + response)
            problems += [f"rollout.engine=vllm with {name}: {problem}{where}"] if problem else []
    return lines, problems


def _measured(name: str, chat: bool, data) -> tuple[Measured, str, str] | str:
    """(the counts, a line about the data, a problem with the data), read from the cache or measured and kept; or
    why this node cannot measure them (a string)."""
    stamp = _model_stamp(name)
    if stamp is None:
        return ("not readable on this node (a hub id not in its Hugging Face cache, or a model not fetched or "
                "converted here); its prompt budget is left to the job, which checks it at its start")
    key = hashlib.sha256(json.dumps([name, stamp, chat, asdict(data), _file_stamp(data.train_path), _code_stamp()],
                                    sort_keys=True, default=str).encode()).hexdigest()[:24]
    kept = comedy_cache() / "job-start" / f"{key}.json"
    try:
        saved = json.loads(kept.read_text(encoding="utf-8"))
        return Measured(**saved["measured"]), saved["note"], saved["problem"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    examples, note, problem = _examples(data)
    try:
        measured = _measure(name, chat, data.dataset, examples)
    except Exception as err:  # noqa: BLE001 - anything transformers raises: the job has its own cache, or fails
        return f"no tokenizer readable here ({type(err).__name__}); its prompt budget is left to the job"
    try:
        atomic_write(kept, json.dumps({"measured": asdict(measured), "note": note, "problem": problem}) + "\n")
    except OSError:
        pass  # a read-only cache: measured again next time
    return measured, note, problem


def _measure(name: str, chat: bool, dataset: str, examples: list[dict]) -> Measured:
    """The job's tokenizer, loaded as the job loads it, and the job's count (transformers: only on a cache miss)."""
    if name == TINY_MODEL:
        from trainer.model.tiny_model import build_tokenizer  # noqa: PLC0415 (torch)

        return measure(build_tokenizer(), dataset, chat, examples)
    from transformers import AutoTokenizer  # noqa: PLC0415 (seconds: only where the cache lacks the counts)

    return measure(AutoTokenizer.from_pretrained(str(_directory(name))), dataset, chat, examples)


def _model_stamp(name: str) -> list | None:
    """What the tokenizer of `name` depends on here, cheaply: the tiny model's code, a local directory's files but
    its weights (name, size, mtime), SmolLM2's record, a hub id's cached tokenizer files; None where this node has
    nothing to read."""
    if name == TINY_MODEL:
        return ["tiny"]
    directory = _directory(name)
    if directory is None:
        return None
    return [(e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in sorted(os.scandir(directory),
            key=lambda e: e.name) if e.is_file() and not e.name.endswith(WEIGHTS)]


def _directory(name: str) -> Path | None:
    """Where this node holds the model's files: a local directory (trainer/model/source.py `local_dir`), or a hub
    id's snapshot in the Hugging Face cache (orchestrator/cluster/paths.py `hub_snapshot`)."""
    directory = local_dir(name)
    if directory is None and "/" in name and not Path(name).expanduser().exists():
        directory = hub_snapshot(name)
    return directory


def _file_stamp(path: str | None) -> list | None:
    try:
        st = Path(path).stat() if path else None
    except OSError:
        return None
    return [str(path), st.st_size, st.st_mtime_ns] if st else None


_CODE: list[str] = []


def _code_stamp() -> str:
    """A hash of the files that write a prompt (PROMPT_CODE), once per process."""
    if not _CODE:
        root, digest = Path(__file__).resolve().parents[2], hashlib.sha256()
        for part in PROMPT_CODE:
            for path in sorted((root / part).rglob("*.py")) if (root / part).is_dir() else [root / part]:
                digest.update(path.read_bytes())
        _CODE.append(digest.hexdigest())
    return _CODE[0]


def _examples(data) -> tuple[list[dict], str, str]:
    """The training split as the job reads it, with a line (the file is not here yet) or a problem (its schema)."""
    try:
        return load_examples(data, "train"), "", ""
    except UserError as err:
        if "does not exist" in str(err) or "is not set" in str(err):
            return [], (f"data {data.dataset}: {err}; its schema and longest problem are checked once it is "
                        f"there"), ""
        return [], "", f"data {data.dataset}: {err}"


def _max_positions(name: str) -> int | None:
    directory = local_dir(name)
    try:
        return int(json.loads((directory / "config.json").read_text())["max_position_embeddings"])
    except (TypeError, OSError, KeyError, ValueError):
        return None
