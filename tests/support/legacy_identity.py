"""The run_key before identity version 2 (the whole config less `tracking`): what the sweeps launched then keyed their
cells by. orchestrator/launch/adopt.py recognises such cells by their ledger records; the tests make them with this."""

from __future__ import annotations

import hashlib
from dataclasses import is_dataclass

from record.identity.run_key import KEY_HEX, canonical_json

EXCLUDED = ("tracking",)


def legacy_run_key(config) -> str:
    """A RunConfig, or a mapping (config.yaml as loaded)."""
    data = config.to_dict() if is_dataclass(config) else dict(config)
    text = canonical_json({k: v for k, v in data.items() if k not in EXCLUDED})
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX]
