"""Sweep file -> spec -> cells: the file read and composed with Hydra (`compose.py`), its header (`spec.py`), the
grid expanded into cells with every problem checked at once (`expand.py`, `config_tree.py`), the base models a
sweep declares (`baselines.py`), and where a launched sweep lives (`locate.py`). Pure: nothing written, nothing
submitted; loading a sweep twice gives the same cells with the same run_keys. Imports cluster/ (a cell's resources
are checked against the profile) and claims/ (the sweep's claims are checked against its cells).
"""
