"""The library map (trainer/analysis/library_map.yaml): every row names a real project configuration and a source,
a broken row is refused with its fix, a library's option values look up their rows, and the bias table's column
names the settings that compute each objective's gradient."""

import pytest
import yaml

from orchestrator.cli import main
from record.errors import ConfigError, UserError
from trainer.analysis import library_map as lm
from trainer.objective.settings import AlgorithmConfig, KLConfig

ISSUE_57 = ("verl", "TRL", "OpenRLHF", "NeMo-RL", "slime", "SkyRL", "prime-rl", "torchforge", "ROLL", "Tinker cookbook")


def test_the_shipped_map_loads_and_covers_the_libraries():
    m = lm.load()
    assert set(ISSUE_57) <= set(m.libraries)
    assert {s.library for s in m.settings} == set(m.libraries)  # no library without a row
    for s in m.settings:
        assert s.source and s.options and s.match in lm.MATCHES
        assert s.kl is not None or s.gap  # no equal here: the row says what is missing


def test_the_rows_read_from_code_say_where():
    """ROLL's, slime's and NeMo-RL's rows were checked against each library's code at a commit: repository@commit,
    then a file with its lines."""
    m = lm.load()
    for s in m.settings:
        if s.library in ("ROLL", "slime", "NeMo-RL"):
            repo = m.libraries[s.library]["repo"]
            assert s.verified.startswith(f"{repo}@"), (s.label(), s.verified)
            assert ".py:" in s.verified, (s.label(), s.verified)


def test_every_equal_is_a_valid_run_config():
    for s in lm.load().settings:
        if s.kl is not None:
            assert isinstance(s.kl, KLConfig)
            AlgorithmConfig(**s.algorithm)


def _one(**row):
    base = {"library": "lib", "options": {"x": 1}, "coefficient": "c", "equals": {"kl.estimator": "k1",
            "kl.placement": "reward"}, "match": "exact", "source": "lib/x.py f"}
    base.update(row)
    return {"libraries": {"lib": {"repo": "o/lib", "version": "abc"}}, "settings": [base]}


@pytest.mark.parametrize("row,says", [
    ({"source": ""}, "source is empty"),
    ({"library": "other"}, "is not under libraries"),
    ({"equals": {"kl.estimator": "k9", "kl.placement": "loss"}}, "kl.estimator"),
    ({"equals": {"kl.estimator": "k1", "kl.placement": "reward", "kl.beta": 0.1}}, "leave beta out"),
    ({"equals": {"kl.estimator": "k1", "kl.placement": "reward", "kl.loss_form": "rho"}}, "loss_form"),
    ({"equals": {"algorithm.advantage": "ppo"}}, "algorithm.advantage"),
    ({"equals": None}, "needs match nearest and a gap"),
    ({"match": "close"}, "valid: exact, expected, nearest"),
    ({"typo": 1}, "unknown field 'typo'"),
])
def test_a_broken_row_is_refused_with_its_fix(row, says):
    with pytest.raises(ConfigError) as err:
        lm.parse(yaml.safe_dump(_one(**row)))
    assert says in str(err.value)


def test_a_library_setting_expands_to_its_configuration():
    (row,) = lm.load().find("verl:kl_loss_type=low_var_kl")
    assert row.overrides() == ["kl.estimator=k3", "kl.placement=loss", "kl.clamp=20.0"]
    assert "verl/workers/utils/losses.py" in row.source
    (trl,) = lm.load().find("TRL:use_bias_correction_kl=true")
    assert (trl.kl.estimator, trl.kl.placement, trl.kl.loss_form) == ("k3", "loss", "rho")
    assert "6503" in trl.default  # the default that changed
    assert len(lm.load().find("trl:beta=0.1")) == 3  # GRPO's two and RLOO's: any positive beta
    assert [s.kl.placement for s in lm.load().find("slime:kl-coef=0.1,advantage-estimator=grpo")] == ["none"]


@pytest.mark.parametrize("query,says", [
    ("nope", "valid: verl, TRL, OpenRLHF"),
    ("verl:colour=red", "its options: "),
    ("verl:kl_loss_type=k9", "its values there: abs, k3+, kl, low_var_kl, mse"),
    ("verl:kl_loss_type", "is not option=value"),
])
def test_an_unknown_library_option_or_value_lists_the_valid_ones(query, says):
    with pytest.raises(UserError, match=None) as err:
        lm.load().find(query)
    assert says in str(err.value)


def test_the_bias_tables_column_names_the_settings_of_each_objective():
    m = lm.load()
    k2_loss = m.labels(KLConfig(estimator="k2", placement="loss", beta=1.0), AlgorithmConfig())
    assert "kl_loss_type=k3+" in k2_loss and "kl_loss_type=mse" in k2_loss
    tinker = m.labels(KLConfig(estimator="k1", placement="reward", beta=1.0, credit="token"),
                      AlgorithmConfig(advantage="none"))
    assert tinker == "~Tinker cookbook kl_penalty_coef>0 kl_discount_factor=0.0"
    k1_reward = m.labels(KLConfig(estimator="k1", placement="reward", beta=1.0), AlgorithmConfig())
    assert "RLOOConfig.beta>0" in k1_reward and "GRPOConfig" not in k1_reward
    assert "kl_penalty=kl" not in m.labels(KLConfig(estimator="k1", placement="reward", beta=1.0),
                                           AlgorithmConfig(advantage="grpo"))  # the row pins rloo
    no_kl = m.labels(KLConfig(), AlgorithmConfig())
    assert "advantage-estimator=grpo" in no_kl and "(before PR #1353)" in no_kl  # the KLs that did nothing
    k3_loss = m.labels(KLConfig(estimator="k3", placement="loss", beta=1.0), AlgorithmConfig())
    assert "kl_loss_type=low_var_kl (clamp 20)" in k3_loss  # verl's clamp, where the sweep has none
    assert m.labels(KLConfig(estimator="k2", placement="reward", beta=1.0), AlgorithmConfig()) == "-"


def test_orchestrate_bias_prints_the_configuration_and_its_row(capsys):
    assert main(["bias", "--library", "verl:kl_loss_type=low_var_kl"]) == 0
    out = capsys.readouterr().out
    assert "kl.estimator=k3 kl.placement=loss kl.clamp=20.0" in out
    assert "biased" in out and "k1-reward" in out and "k2-loss" in out  # its row, K1-reward and K2-loss beside
    assert main(["bias", "--library", "verl:kl_loss_type=nope"]) == 2
    assert "its values there" in capsys.readouterr().err
