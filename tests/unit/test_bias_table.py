"""The bias table (trainer/analysis/bias_table.py): each distinct objective's exact gradient on the toy model agrees
with `orchestrate synthetic` and with the exact identities of test_kl_gradients.py where they overlap; its group
enumeration is exact where the advantage is not linear; a moved stop-gradient changes the verdict."""

import itertools
from dataclasses import replace

import pytest
import torch
import yaml

import trainer.objective.kl
from orchestrator.cli import main
from orchestrator.launch import ledger as L
from orchestrator.sweep.expand import load_sweep
from tests.support.toy_truths import token_forward_kl_grad
from trainer.analysis import bias_table as bt
from trainer.analysis.toy import (
    DTYPE,
    all_sequences,
    sequence_kl_grad,
    token_logprobs,
    token_reverse_kl_grad,
)
from trainer.analysis.toy_study import EXTRA_CONFIGS, PAPER_CONFIGS, TrialBatch, kl_config, run_study
from trainer.objective.estimators import ESTIMATORS
from trainer.objective.settings import AlgorithmConfig, KLConfig

THETA, REF, T = (0.4, -0.3), (-0.2, 0.25), 5  # test_kl_gradients.py's model
PLAIN = AlgorithmConfig(advantage="none", aggregation="seq_mean_token_sum", group_size=1, clip_eps=None)
RLOO = AlgorithmConfig()  # the paper's: RLOO, G = 5, token_mean, clip 0.2


@pytest.fixture(autouse=True)
def fresh_cache():
    bt.row.cache_clear()
    yield
    bt.row.cache_clear()


def on(name_or_kl, algo=PLAIN, T=T, regime="on", off=False):
    kl = kl_config(name_or_kl) if isinstance(name_or_kl, str) else name_or_kl
    return bt.row(bt.objective(kl, algo, off), regime, T, theta=THETA, ref=REF, trials=20, sequences=50)


def vec(values):
    return values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=DTYPE)


def close(a, b, atol=1e-10):
    return torch.allclose(vec(a), vec(b), atol=atol, rtol=0)


@pytest.mark.parametrize("name", PAPER_CONFIGS + EXTRA_CONFIGS)
def test_agrees_with_orchestrate_synthetic(name):
    """Same expectation (enumerated), same truths, same sampled variance (same seed, same batches)."""
    T2, trials, sequences = 4, 30, 40
    study = run_study(theta=bt.THETA, ref=bt.REF, lengths=(T2,), trials=trials, sequences=sequences, configs=(name,),
                      seed=bt.SEED)[0]
    r = bt.row(bt.objective(kl_config(name), PLAIN, False), "on", T2, trials=trials, sequences=sequences)
    assert close(r.expected, vec(study.exact_expectation), atol=1e-12)
    assert close(r.sequence, vec(study.exact_grad), atol=1e-14) and close(r.token, vec(study.token_level_grad))
    assert r.variance == pytest.approx(study.variance, rel=1e-12)


@pytest.mark.parametrize("name,word", [
    ("k1-reward", "unbiased"), ("k1-loss", "no-KL"), ("k1-reward+loss", "unbiased"), ("k3-reward+loss", "unbiased"),
    ("k1-reward-rtg", "unbiased"), ("k2-loss", "token-level"), ("k1-loss-rho", "token-level"),
    ("k2-loss-rho", "token-level"), ("k3-loss-rho", "token-level"), ("k3-loss", "biased"),
])
def test_verdicts_match_the_exact_identities(name, word):
    r = on(name)
    assert r.verdict == word, (r.verdict, r.bias_sq, r.bias_sq_token)
    truth = {"unbiased": sequence_kl_grad(vec(THETA), vec(REF), T), "no-KL": torch.zeros(2, dtype=DTYPE),
             "token-level": token_reverse_kl_grad(vec(THETA), vec(REF), T),
             "biased": token_forward_kl_grad(vec(THETA), vec(REF), T)}[word]  # k3-loss: equation 41
    assert close(r.expected, truth)


def test_k3_in_reward_carries_minus_the_forward_gradient_and_split_betas_are_biased():
    seq, fwd = sequence_kl_grad(vec(THETA), vec(REF), T), token_forward_kl_grad(vec(THETA), vec(REF), T)
    assert close(on("k3-reward").expected, seq - fwd)  # equations 19 and 45
    split = on(KLConfig(estimator="k3", placement="reward+loss", beta_reward=1.0, beta_loss=0.5))
    assert split.verdict == "biased" and close(split.expected, seq - 0.5 * fwd)
    assert split.objective.label().startswith("k3-reward+loss (beta reward 1, loss 0.5) | none G=1")


def test_beta_folds_away_but_its_split_does_not():
    a = bt.objective(KLConfig(estimator="k3", placement="reward", beta=0.05), RLOO, False)
    b = bt.objective(KLConfig(estimator="k3", placement="reward", beta=1.0), RLOO, False)
    c = bt.objective(KLConfig(estimator="k3", placement="reward+loss", beta_reward=0.2, beta_loss=0.1), RLOO, False)
    d = bt.objective(KLConfig(estimator="k3", placement="reward+loss", beta_reward=2.0, beta_loss=1.0), RLOO, False)
    assert a == b and c == d and c != bt.objective(KLConfig(estimator="k3", placement="reward+loss", beta=1.0),
                                                   RLOO, False)
    assert bt.objective(KLConfig(), RLOO, False) == bt.objective(KLConfig(estimator="k3"), RLOO, False)


@pytest.mark.parametrize("advantage,word", [("rloo", "unbiased"), ("dr_grpo", "scaled x0.667")])
def test_group_baselines_as_test_kl_gradients_finds_them(advantage, word):
    # A mean that includes the sample shrinks a reward-side KL's gradient by (G - 1) / G (companion article 8.1).
    algo = AlgorithmConfig(advantage=advantage, aggregation="token_mean", group_size=3, clip_eps=None)
    assert on("k1-reward", algo, T=3).verdict == word


def brute_force(obj, Tb, theta, ref, mu):
    """E[one group's estimate] over every ordered group of G sequences: (2^T)^G of them."""
    G, seqs = obj.algo.group_size, all_sequences(Tb)
    p = token_logprobs((theta if mu is None else mu)[None], seqs).sum(-1).exp()
    idx = torch.tensor(list(itertools.product(range(len(seqs)), repeat=G)))
    est = TrialBatch(seqs[idx], theta, ref, mu).gradients(obj.kl, algo=obj.algo)
    return (p[idx].prod(-1)[:, None] * est).sum(0)


@pytest.mark.parametrize("advantage", ["grpo", "rloo"])
def test_the_multiset_enumeration_is_exact_where_the_advantage_is_not_linear(advantage):
    """GRPO's std and PPO's clip off-policy make a member's gradient non-linear in the others: still exact."""
    algo = AlgorithmConfig(advantage=advantage, aggregation="token_mean", group_size=3, clip_eps=0.2)
    th, rf = vec(bt.THETA), vec(bt.REF)
    mu = bt.behaviour(th, rf, 2)
    for kl in (kl_config("k1-reward"), kl_config("k3-reward+loss")):
        obj = bt.objective(kl, algo, True)
        for m in (None, mu):
            assert close(bt.exact_expected(obj, 2, th, rf, m), brute_force(obj, 2, th, rf, m), atol=1e-13)


def test_off_policy_rho_forms_reach_the_token_level_gradient_with_mu_prefixes():
    th, rf = vec(THETA), vec(REF)
    mu = bt.behaviour(th, rf, T)
    y = all_sequences(T)  # the target enumerated directly, as test_kl_gradients.py does it
    w = token_logprobs(mu[None], y).sum(-1).exp()
    thg = th.clone().requires_grad_(True)
    c = torch.cumsum(y, -1) - y
    pa, pb = torch.sigmoid(thg[0] + thg[1] * c), torch.sigmoid(rf[0] + rf[1] * c)
    (target,) = torch.autograd.grad((w[:, None] * (pa * (pa / pb).log() + (1 - pa) * ((1 - pa) / (1 - pb)).log()))
                                    .sum(), thg)
    for name in ("k1-loss-rho", "k3-loss-rho"):
        r = on(name, PLAIN, regime="off", off=True)
        assert r.verdict == "token-level" and close(r.token, target)
    assert on("k1-reward", PLAIN, regime="off", off=True).verdict != "unbiased"  # section 3.2


def test_a_moved_stop_gradient_changes_the_verdict(monkeypatch):
    assert on("k1-reward").verdict == "unbiased" and on("k1-loss-rho").verdict == "token-level"
    bt.row.cache_clear()
    # rho = pi / sg(mu) with the stop-gradient moved onto the whole ratio: rho*k1 falls back to plain k1.
    monkeypatch.setattr(trainer.objective.kl, "importance_ratio",
                        lambda logp, behavior_logp: torch.exp(logp - logp).detach())
    assert on("k1-loss-rho").verdict == "no-KL"
    # The stop-gradient moved from the reward side to the loss side: k3 in reward+loss loses its pathwise half.
    monkeypatch.setattr(trainer.objective.kl, "kl_loss_per_token",
                        lambda estimator, form, logp, ref_logp, rho: ESTIMATORS[estimator].fn(logp, ref_logp).detach())
    assert on("k3-reward+loss").verdict == "wrong-sign"  # now k3 in reward alone (equation 19)


def test_length_fits_the_group():
    assert bt.length_for([bt.objective(KLConfig(), RLOO, False)]) == 3
    g16 = replace(RLOO, advantage="dr_grpo", group_size=16)
    assert bt.length_for([bt.objective(KLConfig(), g16, True)]) == 2
    assert bt.length_for([bt.objective(KLConfig(), replace(RLOO, group_size=27), False)]) == 2
    assert bt.length_for([bt.objective(KLConfig(), replace(RLOO, group_size=28), False)]) is None


def test_validate_says_when_a_group_is_too_large_to_enumerate(capsys):
    assert main(["validate", "sweeps/smoke.yaml", "algorithm.group_size=64"]) == 0
    assert "bias table: skipped, a group of 64 is too large" in capsys.readouterr().out


def test_the_papers_sweeps_fold_into_a_few_objectives():
    onpolicy = {bt.objective_of_run(c.config) for c in load_sweep("sweeps/onpolicy.yaml", []).cells}
    assert len(onpolicy) == 5 and not any(o.off_policy for o in onpolicy)
    offpolicy = {bt.objective_of_run(c.config) for c in load_sweep("sweeps/offpolicy.yaml", []).cells}
    assert len(offpolicy) == 3 and all(o.off_policy for o in offpolicy)


def test_validate_prints_the_table_and_no_bias_skips_it(capsys):
    assert main(["validate", "sweeps/offpolicy.yaml"]) == 0
    out = capsys.readouterr().out
    assert "3 distinct, T=3" in out and "k1-reward | rloo G=5 token_mean clip 0.2" in out
    assert "off (mu 1 update behind)" in out and "no-KL" in out and "wrong-sign" in out
    assert main(["validate", "sweeps/offpolicy.yaml", "--no-bias"]) == 0
    assert "toy model" not in capsys.readouterr().out


def test_the_report_shows_the_table_and_writes_it_beside(tmp_path, capsys):
    """Cells as the ledger and config.yaml leave them: k3 in reward on-policy (two betas, one objective), k1 in loss
    with off-policy minibatches, and one whose config no longer reads (left out, named)."""
    sweep_dir = tmp_path / "mini"
    configs = {"a": {"kl": {"estimator": "k3", "placement": "reward", "beta": 0.1}},
               "b": {"kl": {"estimator": "k3", "placement": "reward", "beta": 1.0}},
               "c": {"kl": {"estimator": "k1", "placement": "loss", "beta": 0.1},
                     "optim": {"batch_prompts": 1024, "minibatch_prompts": 256}},
               "d": {"kl": {"estimator": "k9", "placement": "reward", "beta": 0.1}}}
    for key, config in configs.items():
        record = L.new_record(sweep_dir.name, key, key, {"kl.beta": config["kl"]["beta"]}, sweep_dir / key)
        L.add_attempt(record, "train", f"x-{key}", 1.0, job_id=key, state="COMPLETED", executor="local")
        L.Ledger(sweep_dir).save(record)
        (sweep_dir / key).mkdir(parents=True)
        (sweep_dir / key / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["report", str(sweep_dir), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    table = (tmp_path / "out" / "bias-table.md").read_text()
    assert "| 2 | k3-reward \\| rloo G=5 token_mean clip 0.2 | on |" in table
    assert "| 1 | k1-loss \\| rloo G=5 token_mean clip 0.2 | on | (+0.0000, +0.0000) |" in table
    assert "| 1 | k1-loss \\| rloo G=5 token_mean clip 0.2 | off (mu 1 update behind) |" in table
    assert "| 2 | k3-reward \\| rloo G=5 token_mean clip 0.2 | on |" in printed and "bias-table.md" in printed
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Each objective's gradient on the toy model" in md and "1 cell(s) left out" in md and ": d." in md
