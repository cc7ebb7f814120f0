"""Sampling defaults that fit the model: its generation_config.json, the model-card table, the built-in fallback;
in the sidebar (derived, re-derived on a model switch unless changed, reset) and in the API server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai
import pytest

from app.clients.generation_defaults import BUILT_IN, defaults_for_settings, generation_defaults, read_generation_config
from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings, ServerSettings
from app.frontends.api.server_app import create_app
from harness.local_http import serving
from tests.helpers import open_app


def model_folder(root: Path, name: str, generation_config: dict | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if generation_config is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation_config))
    return folder


def test_only_values_the_config_states_are_read(tmp_path):
    folder = model_folder(tmp_path, "m", {"bos_token_id": 1, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                                           "repetition_penalty": 1.05, "transformers_version": "5.0"})
    assert read_generation_config(folder) == {"temperature": 0.6, "top_k": 20, "top_p": 0.95,
                                              "repetition_penalty": 1.05}
    assert read_generation_config(model_folder(tmp_path, "ids-only", {"bos_token_id": 1, "eos_token_id": 2})) == {}
    assert read_generation_config(tmp_path / "no-such-folder") == {}


def test_greedy_configs_negative_top_k_and_broken_files(tmp_path):
    assert read_generation_config(model_folder(tmp_path, "greedy", {"do_sample": False, "temperature": 0.9})) == {
        "temperature": 0.0}
    assert read_generation_config(model_folder(tmp_path, "k", {"top_k": -1})) == {"top_k": 0}
    # Values our generation settings would refuse are left to the next layer, not passed on to crash later.
    assert read_generation_config(model_folder(tmp_path, "bad", {"top_p": 0, "temperature": "hot"})) == {}
    broken = model_folder(tmp_path, "broken")
    (broken / "generation_config.json").write_text("{not json")
    assert read_generation_config(broken) == {}
    (broken / "generation_config.json").write_text("[1, 2]")
    assert read_generation_config(broken) == {}


def test_the_embedded_smollm2_gets_its_model_card_settings(smollm2_dir):
    defaults = defaults_for_settings(ModelSettings())  # "" = the embedded model
    assert defaults.values == {"temperature": 0.2, "top_p": 0.9, "top_k": 50, "repetition_penalty": 1.1}
    assert defaults.sources["temperature"] == defaults.sources["top_p"] == "SmolLM2 model card"
    assert defaults.describe() == ("temperature 0.2, top p 0.9 (SmolLM2 model card); top k 50 (built-in default); "
                                   "repetition penalty 1.1 (measured by bench/smoke_set.py)")
    # The same through the loaded client, and for an API model id naming it.
    assert HFClient(ModelSettings(model_path=str(smollm2_dir), device="cpu")).generation_defaults == defaults
    assert generation_defaults("HuggingFaceTB/SmolLM2-1.7B-Instruct").values["temperature"] == 0.2


def test_a_models_own_config_beats_the_table_and_the_table_beats_the_fallback(tmp_path):
    own = generation_defaults("SmolLM2-360M-Instruct", model_folder(tmp_path, "a", {"temperature": 0.5}))
    assert own.values["temperature"] == 0.5 and own.sources["temperature"] == "a/generation_config.json"
    assert own.values["top_p"] == 0.9 and own.sources["top_p"] == "SmolLM2 model card"
    unknown = generation_defaults("my-model", model_folder(tmp_path, "b"))
    assert unknown.values == BUILT_IN


def test_defaults_become_generation_params_with_overrides():
    defaults = generation_defaults("SmolLM2")
    params = defaults.params(temperature=None, top_k=7, max_new_tokens=9)
    assert (params.temperature, params.top_p, params.top_k, params.max_new_tokens) == (0.2, 0.9, 7, 9)
    with pytest.raises(ValueError, match="top_p"):
        defaults.params(top_p=0)


# ----- the sidebar ----------------------------------------------------------------------------------------------

@pytest.fixture
def two_models(tmp_path, tiny_model_dir):
    """Two copies of the tiny model: one with its authors' sampling settings, one with none."""
    plain = tmp_path / "plain-model"
    tuned = tmp_path / "tuned-model"
    shutil.copytree(tiny_model_dir, plain)
    shutil.copytree(tiny_model_dir, tuned)
    config = json.loads((tuned / "generation_config.json").read_text())
    (tuned / "generation_config.json").write_text(json.dumps({**config, "temperature": 0.3, "top_p": 0.8}))
    return plain, tuned


def sampling(at) -> tuple[float, float]:
    return at.slider(key="temperature").value, at.slider(key="top_p").value


def sidebar_captions(at) -> str:
    return " ".join(caption.value for caption in at.sidebar.caption)


def test_sidebar_starts_from_the_model_rederives_on_switch_unless_changed_and_resets(monkeypatch, two_models):
    plain, tuned = two_models
    with open_app(monkeypatch, plain) as at:
        assert sampling(at) == (0.7, 0.9)  # no settings in the folder, no card entry: the built-in fallback
        assert "built-in default" in sidebar_captions(at)

        at.text_input(key="settings.model.model_path").set_value(str(tuned)).run()
        assert sampling(at) == (0.3, 0.8)
        assert "temperature 0.3, top p 0.8 (tuned-model/generation_config.json)" in sidebar_captions(at)
        assert at.button(key="reset_sampling").disabled

        at.slider(key="temperature").set_value(1.1).run()  # the user's own choice survives a model switch...
        assert "Changed by you: temperature" in sidebar_captions(at)
        at.text_input(key="settings.model.model_path").set_value(str(plain)).run()
        assert sampling(at) == (1.1, 0.9)  # ...while top_p, untouched, follows the new model

        at.button(key="reset_sampling").click().run()
        assert sampling(at) == (0.7, 0.9)
        assert "Changed by you" not in sidebar_captions(at)
        assert not at.exception


# ----- the API server -------------------------------------------------------------------------------------------

def test_the_server_fills_in_left_out_sampling_from_the_model(tmp_path, tiny_model_dir):
    """A model whose authors chose greedy decoding: requests without temperature are greedy, so they all give the
    same answer, the one an explicit temperature 0 gives; an explicit temperature still samples."""
    greedy = tmp_path / "greedy-model"
    shutil.copytree(tiny_model_dir, greedy)
    config = json.loads((greedy / "generation_config.json").read_text())
    (greedy / "generation_config.json").write_text(json.dumps({**config, "do_sample": False}))
    client = HFClient(ModelSettings(model_path=str(greedy), device="cpu"))
    try:
        with serving(create_app(ServerSettings(served_name="m"), client=client)) as base:
            sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
            ask = [{"role": "user", "content": "Hello there"}]

            def reply(**kwargs) -> str:
                answer = sdk.chat.completions.create(model="m", messages=ask, max_tokens=24, **kwargs)
                return answer.choices[0].message.content

            left_out = {reply() for _ in range(3)}
            assert left_out == {reply(temperature=0)}
            assert len({reply(temperature=1.5, seed=seed) for seed in range(4)}) > 1
    finally:
        client.close()
