"""Claims: what a sweep is run to test, from the claims file to the verdict. Parsing and checking a claim (`parse.py`),
where claims come from (`files.py`: the claims files and `sweep.claims`), which cells each of its rows compares
(`rows.py`), the statistics of the configurations' means (`stats.py`) with their paired, hierarchical intervals over
seeds and problems (`intervals.py`, its input checked in `paired_data.py`), the run-level measures and rates
(`run_measures.py`), each row's verdict (`verdicts.py`) and the Claims table with claims.csv / claims.json
(`table.py`). The quantiles are scipy.stats's.

Pure: claims, cells and their scores come in as plain values; nothing here reads a run directory, the ledger or
MLflow (orchestrator/report/claim_inputs.py reads them for the report). It imports none of orchestrator's other
subpackages, so it comes first in their order: sweep/ checks a sweep's claims against its cells at load, the dry
run counts their rows (launch/), and report/ computes and prints them.
"""
