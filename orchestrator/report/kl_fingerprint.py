"""Does each KL term reach the gradient? Beside the slope check (orchestrator/report/kl_response.py), the
fingerprint each cell recorded (trainer/objective/fingerprint.py, in objective.json) against that of its own
settings with beta zeroed (orchestrator/sweep/knobs.py `zero_beta`), through the same fingerprint function: equal,
and the KL term does nothing to the gradient, whatever its coefficient. No curve is needed, so a flag here stands
from the first step a cell trained; the comparison is orchestrator/status/kl_flags.py `fingerprint_check`, which
status runs on the recorded hashes alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.status import kl_flags
from orchestrator.sweep.knobs import zero_hash
from record.errors import ConfigError
from trainer.objective.settings import AlgorithmConfig, KLConfig

TITLE = "Does each KL term reach the gradient?"


def _settings(flat: Mapping) -> tuple[KLConfig, AlgorithmConfig] | None:
    """The cell's own KL and algorithm settings (its beta as trained, unlike the bias table's canonical one)."""
    def section(name: str) -> dict:
        return {k[len(name) + 1:]: v for k, v in flat.items() if k.startswith(f"{name}.")}
    try:
        return KLConfig(**section("kl")), AlgorithmConfig(**section("algorithm"))
    except (ConfigError, TypeError):
        return None  # a config.yaml written by older code: nothing to compare with


def check(rows: Sequence[Mapping], configs: Mapping[str, Mapping]) -> list[dict]:
    """kl_flags.fingerprint_check's entries for the report's cells (status rows with their "fingerprint"), each
    cell's beta = 0 hash computed from its config.yaml's settings (`configs`: run_key -> flat config)."""
    cells, zeros = [], {}
    for r in rows:
        settings = _settings(configs.get(r["run_key"]) or {})
        if settings is None:
            continue
        cells.append({"name": r["config"], "context": kl_flags.context(r["axes"]),
                      "reference": settings[0].placement == "none", "hash": r.get("fingerprint"),
                      "settings": settings})

    def zero(cell: Mapping) -> str:
        if cell["settings"] not in zeros:
            zeros[cell["settings"]] = zero_hash(*cell["settings"])
        return zeros[cell["settings"]]

    return kl_flags.fingerprint_check(cells, zero)


def blocks(entries: Sequence[Mapping]) -> list[tuple]:
    """The check as report blocks: the flagged configurations named, then the table."""
    if not entries:
        return []
    flagged = [e["name"] for e in entries if e["flagged"]]
    rows = [(e["name"], e["hash"], e["zero"] or "-", "FLAGGED" if e["flagged"] else "-", e["why"]) for e in entries]
    return [("h", 2, TITLE),
            ("p", "Per configuration with a KL term, the gradient fingerprint its cells recorded at their start "
                  "(trainer/objective/fingerprint.py: the training's own loss path on a fixed probe, hashed) "
                  "against the fingerprint of the same settings with beta zeroed. Equal: the KL coefficient never "
                  "reaches the gradient. "
                  + (f"Flagged: {'; '.join(flagged)}." if flagged else "No configuration is flagged.")),
            ("table", ("configuration", "fingerprint", "at beta = 0", "flagged", "why"), rows)]


def lines(entries: Sequence[Mapping]) -> list[str]:
    """What the command prints: each flagged configuration, by name."""
    return [f"warning: KL term does not reach the gradient: {e['name']}: {e['why']}" for e in entries if e["flagged"]]
