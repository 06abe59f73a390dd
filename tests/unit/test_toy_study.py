"""The toy study: Monte Carlo agrees with exact expectations; K1-reward is the least biased of the paper's four."""

import json

import torch

from orchestrator.cli import main
from trainer.analysis.toy_study import EXTRA_CONFIGS, PAPER_CONFIGS, run_study, to_json

FIELDS = {"estimator", "placement", "T", "mean_grad", "exact_grad", "bias_sq", "variance", "stderr"}


def test_monte_carlo_means_agree_with_exact_expectations_within_4_stderr():
    torch.manual_seed(0)
    recs = run_study(lengths=(2, 4, 8), trials=40, sequences=200, configs=PAPER_CONFIGS + EXTRA_CONFIGS, seed=3)
    for r in recs:
        assert r.exact_expectation is not None
        assert r.z_max < 4.0, (r.config, r.T, r.z_max)


def test_k1_in_reward_has_the_smallest_bias_of_the_papers_four():
    recs = run_study(lengths=(2, 4, 8, 12), trials=30, sequences=300, seed=1)
    four = ("k1-reward", "k1-loss", "k3-reward", "k3-loss")
    for T in (2, 4, 8, 12):
        bias = {r.config: r.bias_sq for r in recs if r.T == T and r.config in four}
        assert min(bias, key=bias.get) == "k1-reward", (T, bias)


def test_rloo_baseline_in_the_study_keeps_the_expectation():
    recs = run_study(lengths=(4,), trials=40, sequences=200, configs=("k1-reward",), group_size=5, seed=2)
    assert recs[0].z_max < 4.0


def test_cli_writes_json_records_and_the_figure(tmp_path, capsys):
    out, png = tmp_path / "toy.json", tmp_path / "fig.png"
    rc = main(["synthetic", "--lengths", "2,4", "--trials", "10", "--sequences", "50",
               "--json", str(out), "--plot", str(png)])
    assert rc == 0
    records = json.loads(out.read_text())
    assert len(records) == 2 * len(PAPER_CONFIGS)
    assert FIELDS <= set(records[0])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "k3-reward" in capsys.readouterr().out


def test_cli_refuses_bad_input_with_every_problem(capsys):
    rc = main(["synthetic", "--trials", "1", "--sequences", "10", "--group-size", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and "--trials 1" in err and "--group-size 3" in err
    rc = main(["synthetic", "--configs", "k4-loss,k1-sideways"])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown value 'k4'" in err and "unknown value 'sideways'" in err


def test_to_json_round_trips():
    recs = run_study(lengths=(2,), trials=3, sequences=10, configs=("k1-loss",))
    assert json.loads(json.dumps(to_json(recs)))[0]["placement"] == "loss"
