"""What a sweep will cost, said before it is submitted (orchestrator/launch/costs.py): GPU-hours with the retry
bounds, checkpoint and export bytes against the free space of output_root, a sweep that cannot fit refused. The disk
peak models the run (issue 43, item 2): the throttle and checkpoint retention give the expected peak, checked
against hand computations, with the worst case (nothing freed) beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.launch.costs import costs, disk_problem, free_space, gigabytes, lines
from orchestrator.launch.plan import Triage, launch_plan, make_plan
from orchestrator.sweep.expand import load_sweep
from trainer.analysis.model_shapes import SHAPES

REPO = Path(__file__).resolve().parents[2]


def test_the_papers_sweep_costs_what_its_shapes_say():
    sweep = load_sweep(REPO / "sweeps" / "onpolicy.yaml")
    plan = make_plan(sweep)
    c = costs(sweep, plan, max_retries=3, free_bytes=10**12)
    per_param = 2 * 14 + 2  # keep_last 2 ZeRO-3 checkpoints and one bf16 export
    models = [cell.config.model.name_or_path.split("/")[-1].lower() for cell in sweep.cells]
    assert c.bytes_nothing_freed == sum(SHAPES[m].params * per_param for m in models)
    # a100: one training array of 102 cells (both models take 2 nodes), array_parallelism 8, final-export: the 16
    # largest cells' checkpoints (Llama-3.1-8B's) and all 102 exports
    llama = SHAPES["llama-3.1-8b-instruct"].params
    assert c.bytes_at_peak == 16 * llama * 2 * 14 + sum(SHAPES[m].params * 2 for m in models)
    assert c.gpu_hours == plan.counts()["gpu_hours_max"] and c.gpu_hours_retries == round(4 * c.gpu_hours, 1)
    assert not c.fits and "lower checkpoint.keep_last" in disk_problem(c)
    assert costs(sweep, plan, 3, 10**14).fits and disk_problem(costs(sweep, plan, 3, 10**14)) is None
    # 19,992 GPU-hours of cells (102 x 8 GPUs x 24 h, 102 x 1 x 4 h) and 12 of its three baselines (1 GPU, 4 h)
    assert c.gpu_hours == 20004 and "up to 80016" in lines(c)[0] and "TB" not in lines(c)[1]
    assert "5,193.4 GB expected at the peak, 23,938.2 GB if nothing is freed" in lines(c)[1]


def test_keep_last_one_still_holds_two_checkpoints_at_the_peak():
    sweep = load_sweep(REPO / "sweeps" / "onpolicy.yaml", ["checkpoint.keep_last=1"])
    two = load_sweep(REPO / "sweeps" / "onpolicy.yaml", ["checkpoint.keep_last=2"])
    assert costs(sweep, make_plan(sweep), 3, None).bytes_at_peak == costs(two, make_plan(two), 3, None).bytes_at_peak


QWEN3_4B = SHAPES["qwen3-4b-instruct-2507"].params  # 4,022,468,096
CHECKPOINTS, EXPORT = QWEN3_4B * 2 * 14, QWEN3_4B * 2  # keep_last 2 ZeRO-3 checkpoints in bf16; the bf16 export


def four_b(tmp_path: Path, *overrides: str):
    """The issue's sweep: 18 cells of Qwen3-4B on the a100 profile (array_parallelism 8, final-export), one array."""
    path = tmp_path / "qwen3-4b-18.yaml"
    path.write_text(f"""defaults: [base, {{model: qwen3-4b-instruct-2507}}, {{data: math}}, {{algorithm: rloo}}, _self_]
sweep:
  seeds: [0, 1, 2]
  grid:
    - {{kl.estimator: "k1,k3", kl.placement: reward, kl.beta: "0.05,0.1,0.3"}}
  slurm: {{profile: a100}}
  output_root: {tmp_path / "runs"}
""")
    sweep = load_sweep(path, list(overrides))
    assert len(sweep.cells) == 18
    return sweep


def test_more_cells_than_the_throttle_peak_at_two_throttles_of_checkpoints_with_final_export(tmp_path):
    # By hand: 18 cells of 4,022,468,096 parameters, each 2 x 14 bytes a parameter of checkpoints (112.6 GB) and 2
    # of export (8.0 GB). Nothing freed: 18 x 120.7 = 2,172.1 GB (the refusal). final-export with
    # array_parallelism 8: 8 training + 8 evaluating cells hold checkpoints, 16 x 112.6 + 18 x 8.0 = 1,946.9 GB.
    sweep = four_b(tmp_path)
    c = costs(sweep, make_plan(sweep), 3, 2_000 * 10**9)
    assert c.bytes_nothing_freed == 18 * (CHECKPOINTS + EXPORT) == 18 * 30 * QWEN3_4B
    assert c.bytes_at_peak == 16 * CHECKPOINTS + 18 * EXPORT == 484 * QWEN3_4B
    assert (c.trained, c.holding, c.retention, c.parallelism) == (18, 16, "final-export", 8)
    assert c.fits and disk_problem(c) is None  # 2 TB free: the worst case would not fit, the run does
    assert "1,946.9 GB expected at the peak, 2,172.1 GB if nothing is freed" in lines(c)[1]
    assert "16 of the 18 cell(s) trained" in lines(c)[1]
    # a throttle of 4: 8 cells hold checkpoints, 8 x 112.6 + 18 x 8.0 = 1,045.8 GB
    four = four_b(tmp_path, "sweep.slurm.overrides.array_parallelism=4")
    assert costs(four, make_plan(four), 3, None).bytes_at_peak == 8 * CHECKPOINTS + 18 * EXPORT == 260 * QWEN3_4B
    # a throttle of 9 or more: all 18 may hold checkpoints at once, as nothing freed
    wide = four_b(tmp_path, "sweep.slurm.overrides.array_parallelism=9")
    assert costs(wide, make_plan(wide), 3, None).bytes_at_peak == 18 * (CHECKPOINTS + EXPORT)


def test_without_retention_the_expected_peak_is_the_worst_case_and_the_refusal_names_retention(tmp_path):
    sweep = four_b(tmp_path, "sweep.slurm.overrides.checkpoint_retention=all")
    c = costs(sweep, make_plan(sweep), 3, 2_000 * 10**9)
    assert c.bytes_at_peak == c.bytes_nothing_freed == 18 * 30 * QWEN3_4B and c.holding == 18
    problem = disk_problem(c)
    assert not c.fits and "2,172.1 GB at the expected peak" in problem
    assert "set checkpoint_retention: final-export (sweep.slurm.overrides.checkpoint_retention)" in problem
    assert "--ignore-disk-peak" in problem and "array_parallelism" not in problem
    assert "checkpoint_retention all frees none" in lines(c)[1]
    retained = four_b(tmp_path)
    tight = costs(retained, make_plan(retained), 3, 1_000 * 10**9)
    assert "lower array_parallelism (now 8: sweep.slurm.overrides.array_parallelism)" in disk_problem(tight)
    assert "1,946.9 GB at the expected peak (2,172.1 GB if nothing is freed)" in disk_problem(tight)


def test_arrays_run_side_by_side_each_under_its_own_throttle(tmp_path):
    # max_array_size 5 splits the 18 cells into arrays of 5, 5, 5 and 3, all submitted at once; throttle 2: each
    # holds at most 4 cells' checkpoints, 4 + 4 + 4 + 3 = 15
    sweep = four_b(tmp_path, "sweep.slurm.overrides.max_array_size=5", "sweep.slurm.overrides.array_parallelism=2")
    plan = make_plan(sweep)
    assert [g.size for g in plan.train] == [5, 5, 5, 3]
    assert costs(sweep, plan, 3, None).bytes_at_peak == 15 * CHECKPOINTS + 18 * EXPORT


def test_only_the_cells_a_launch_trains_count_and_evaluations_alone_add_nothing(tmp_path):
    # a relaunch trains 10 cells and evaluates 8 already trained: throttle 4, 8 of the 10 hold checkpoints
    sweep = four_b(tmp_path, "sweep.slurm.overrides.array_parallelism=4")
    keys = tuple(c.run_key for c in sweep.cells)
    plan = launch_plan(sweep, Triage(train=keys[:10], eval=keys[10:], kept={}), 1000)
    c = costs(sweep, plan, 3, None)
    assert (c.trained, c.holding) == (10, 8)
    assert c.bytes_at_peak == 8 * CHECKPOINTS + 10 * EXPORT
    assert c.bytes_nothing_freed == 10 * (CHECKPOINTS + EXPORT)


def test_evaluations_slower_than_training_count_as_never_freed(tmp_path):
    # an evaluation's time limit (2000 min) past the training's (1440): evaluations may fall behind the throttle
    sweep = four_b(tmp_path, "sweep.slurm.overrides.eval.time_min=2000")
    c = costs(sweep, make_plan(sweep), 3, None)
    assert c.bytes_at_peak == c.bytes_nothing_freed and c.behind == 18
    assert "18 cell(s) whose evaluation's time limit exceeds their training's counted as never freed" in lines(c)[1]


def test_free_space_is_read_from_the_nearest_existing_parent(tmp_path):
    # Not ==: other processes (make test's other workers) write to the same disk between the two reads; a loaded
    # parallel run saw them differ by 12 KB.
    missing, parent = free_space(tmp_path / "not" / "yet" / "there"), free_space(tmp_path)
    assert parent > 0 and abs(missing - parent) < 256 * 2**20, (missing, parent)


def test_the_dry_run_states_the_costs_and_where_a_submission_would_stop():
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--dry-run", "--rows", "1",
                           str(REPO / "sweeps" / "onpolicy.yaml")], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "GPU-hours: at most 20004" in done.stdout  # the cells' 19,992 and the baselines' 12
    assert "disk: 5,193.4 GB expected at the peak, 23,938.2 GB if nothing is freed" in done.stdout


def test_ignore_disk_peak_lifts_the_disk_refusal_and_nothing_else(tmp_path):
    """The dry run says what a submission would do: with the flag the disk no longer stops it. keep_last 1000 puts
    the expected peak (16 x 1000 checkpoints of Qwen3-4B) past any disk a test runs on."""
    sweep = four_b(tmp_path, "checkpoint.keep_last=1000")
    c = costs(sweep, make_plan(sweep), 3, free_space(tmp_path))
    assert not c.fits and c.bytes_at_peak == (16 * 1000 * 14 + 18 * 2) * QWEN3_4B
    said = {}
    for flags in ([], ["--ignore-disk-peak"]):
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--dry-run", "--rows", "1",
                               *flags, sweep.source, "checkpoint.keep_last=1000"], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        said[bool(flags)] = [line for line in done.stdout.splitlines() if "would stop here" in line]
    disk = [line for line in said[False] if f"checkpoints and exports need {gigabytes(c.bytes_at_peak)}" in line]
    assert len(disk) == 1 and "--ignore-disk-peak" in disk[0]
    assert said[True] == [line for line in said[False] if line not in disk]
