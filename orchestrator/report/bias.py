"""The report's bias table: each distinct objective among a sweep's cells on the toy model of section 3.3
(trainer/analysis/bias_table.py), as report blocks and as a Markdown file of its own. Pure but for torch, imported when
the table is made; orchestrator/report/write.py reads the cells' configs and writes the files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from record.errors import ConfigError
from trainer.objective.settings import AlgorithmConfig, KLConfig

TITLE = "Each objective's gradient on the toy model"
OFF_POLICY = ("optim.minibatch_prompts", "optim.batch_prompts", "rollout.async_level")  # off-policy when set so


def objective_of(flat: Mapping):
    """A cell's objective from its config.yaml as dotted keys (orchestrator/status/cells.py `run_config`), or None
    when the file lacks or no longer fits the settings (a config written by older code)."""
    from trainer.analysis.bias_table import objective  # noqa: PLC0415 (torch: only when the table is made)

    def section(name: str) -> dict:
        return {k[len(name) + 1:]: v for k, v in flat.items() if k.startswith(f"{name}.")}
    try:
        kl, algo = KLConfig(**section("kl")), AlgorithmConfig(**section("algorithm"))
    except (ConfigError, TypeError):
        return None
    get = flat.get  # the keys of OFF_POLICY
    off = (get("optim.minibatch_prompts") or 0) < (get("optim.batch_prompts") or 0) or (
        get("rollout.async_level") or 0) > 0
    return objective(kl, algo, off)


def _reads(flat: Mapping) -> str:
    """What objective_of reads of a config, as one string (values may be lists: not hashable)."""
    return repr([(k, v) for k, v in flat.items() if k.startswith(("kl.", "algorithm.")) or k in OFF_POLICY])


def table(configs: Mapping[str, Mapping]) -> dict:
    """{"T", "rows": [cells as trainer/analysis/bias_table.py HEADER with the count first], "caption", "skipped": cells
    whose config could not be read}. T None: no cells, or a group too large to enumerate."""
    from trainer.analysis import bias_table  # noqa: PLC0415 (torch)

    objectives, made = {}, {}
    for key, flat in configs.items():  # cells alike in what objective_of reads share one: a few among 10,000
        said = _reads(flat)
        if said not in made:
            made[said] = objective_of(flat)
        objectives[key] = made[said]
    counts = Counter(o for o in objectives.values() if o is not None)
    T, rows = bias_table.table(list(counts)) if counts else (None, [])
    return {"T": T, "header": ("cells", *bias_table.HEADER),
            "rows": [(str(counts[r.objective]), *bias_table.cells(r)) for r in rows],
            "caption": bias_table.caption(T, rows) if T else "",
            "skipped": sorted(k for k, o in objectives.items() if o is None), "distinct": len(counts)}


def blocks(made: Mapping) -> list[tuple]:
    """The table as report blocks (orchestrator/report/page.py renders them); none without cells."""
    if not made["distinct"] and not made["skipped"]:
        return []
    out: list[tuple] = [("h", 2, TITLE)]
    if made["T"] is None:
        out.append(("p", "No table: no cell's configuration could be read, or a group is too large to enumerate on "
                         "the toy model."))
    else:
        out += [("p", f"{made['distinct']} distinct objective(s) among the cells (docs/trainer.md, \"The bias "
                      f"table\"). {made['caption']}"), ("table", made["header"], made["rows"])]
    if made["skipped"]:
        out.append(("p", f"{len(made['skipped'])} cell(s) left out, their config.yaml unreadable as today's "
                         f"settings: {', '.join(made['skipped'])}."))
    return out
