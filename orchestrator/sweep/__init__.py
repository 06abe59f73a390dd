"""Sweep file -> spec -> cells: Hydra composition, grid expansion, every problem checked at once. Pure (no job,
no file written): loading a sweep twice gives the same cells with the same run_keys. Imports cluster/profile.py
(a cell's resources are checked against the profile) and baselines/declare.py (baselines are declared in the sweep
file); nothing that submits.
"""
