"""Sweep file -> spec -> cells: Hydra composition, grid expansion, every problem checked at once (`expand.py`,
`spec.py`, `config_tree.py`), the base models a sweep declares (`baselines.py`), and where a launched sweep lives
(`locate.py`). Pure: nothing written, nothing submitted; loading a sweep twice gives the same cells with the same
run_keys. Imports cluster/ (a cell's resources are checked against the profile).
"""
