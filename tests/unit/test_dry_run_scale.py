"""`orchestrate sweep --dry-run` of a large sweep (issue 25): the first 200 cells, a line for the rest, the counts,
and one sbatch script of each kind (the chunks of MaxArraySize differ only in their job name and dependency);
--rows 0 lists every cell. The real command over a sweep file of 250 cells (25 betas x 10 seeds) in chunks of 100."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli import main

SWEEP = """defaults: [base, {{model: tiny}}, {{data: tiny}}, {{algorithm: rloo}}, _self_]
rollout: {{engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}}
kl: {{estimator: k1, placement: reward}}
sweep:
  name: wide
  output_root: {root}/runs
  seeds: range(0,10)
  axes: {{kl.beta: "{betas}"}}
  slurm: {{profile: local, overrides: {{max_array_size: 100}}}}
"""


def test_a_large_dry_run_prints_the_first_cells_the_counts_and_one_script_of_each_kind(tmp_path, capsys,
                                                                                         monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "wide.yaml"
    path.write_text(SWEEP.format(root=tmp_path, betas=",".join(f"{0.01 * (i + 1):g}" for i in range(25))))
    assert main(["sweep", "--dry-run", "--executor", "slurm", str(path)]) == 0
    out = capsys.readouterr().out
    assert "sweep wide: 250 cells" in out and "... and 50 more cells (--rows 0 shows all)" in out, out[-3000:]
    assert "│ 199 │" in out and "│ 200 │" not in out  # the first 200 rows, no more
    assert ("counts: cells 250, skipped 0, train_arrays 3, eval_arrays 3, baselines 0, baseline_arrays 0, "
            "array_tasks 500") in out
    assert "train-2 (50 tasks) --aftercorr--> eval-2 (50 tasks)" in out
    scripts = [line.split("sbatch script: ")[1].strip(" ─") for line in out.splitlines() if "sbatch script:" in line]
    assert scripts == ["wide-train-0", "wide-eval-0", "wide-train-2", "wide-eval-2"], scripts  # the last chunk: 50
    assert "the sbatch scripts of 2 more arrays are those above but for their --job-name and --dependency: " \
           "train-1 (as train-0), eval-1 (as eval-0)" in " ".join(out.split())
    assert not (tmp_path / "runs").exists()

    assert main(["sweep", "--dry-run", "--executor", "slurm", "--rows", "0", str(path)]) == 0
    out = capsys.readouterr().out
    assert "│ 249 │" in out and "more cells" not in out
    assert not Path(tmp_path / "runs").exists()
