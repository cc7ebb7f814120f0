"""Compare's targets (app/compare/targets.py) and the headless prompts file (app/compare/prompt_set.py): what a file may
say, what it may not (each refusal naming the target or line and the field), the two default targets, and the
examples `make compare` runs. No model is loaded."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.clients.embedded_model import model_folder
from app.clients.generation_defaults import defaults_for_settings
from app.compare.prompt_set import PromptsError, load_prompts
from app.compare.targets import (
    MAX_TARGETS,
    Target,
    TargetsError,
    check_targets,
    default_targets,
    load_targets,
    parse_targets,
)
from app.config import ModelSettings
from app.tools import load_tools

ROOT = Path(__file__).resolve().parents[2]
BASE = ModelSettings(device="cpu", hf_max_batch=4)  # what a target's "model" leaves out


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ----- targets ------------------------------------------------------------------------------------------------------

def test_a_target_that_names_nothing_is_the_apps_model_at_its_own_defaults():
    [target] = parse_targets({"targets": [{"label": "Plain"}]}, BASE)
    assert target.settings == BASE  # equal settings: it shares the app's loaded engine
    own = defaults_for_settings(BASE).params()
    assert target.params == own and target.params.temperature == 0.2  # SmolLM2's card, as the sidebar starts
    assert (target.system_prompt, target.tool_choice) == ("", None)


def test_a_target_file_sets_model_sampling_system_prompt_and_tool_choice(tmp_path):
    path = write(tmp_path, "targets.json", json.dumps({"targets": [
        {"label": " Hot ", "model": {"path": "/models/x", "dtype": "float32", "max_context_tokens": 2048},
         "sampling": {"temperature": 1, "top_k": 0, "max_new_tokens": 64, "seed": 7, "thinking": False},
         "system_prompt": "Be brief.", "tool_choice": "calculator"},
        {"label": "Remote", "model": {"backend": "openai", "api_base_url": "http://127.0.0.1:9/v1", "api_key": "sk-1",
                                      "api_model": "smollm2"}, "sampling": {"top_p": 0.5}},
    ]}))
    hot, remote = load_targets(path, BASE)
    assert hot.label == "Hot"
    assert hot.settings == replace(BASE, model_path="/models/x", dtype="float32", max_context_tokens=2048)
    assert (hot.params.temperature, hot.params.top_k, hot.params.max_new_tokens, hot.params.seed,
            hot.params.thinking) == (1.0, 0, 64, 7, False)
    assert hot.params.top_p == 0.9 and hot.params.server_defaults == frozenset()  # the rest: defaults
    assert (hot.system_prompt, hot.tool_choice) == ("Be brief.", "calculator")
    # A remote server applies its own model's defaults to what the target leaves out, as the sidebar leaves it.
    assert remote.settings.backend == "openai" and remote.params.top_p == 0.5
    assert remote.params.server_defaults == {"temperature", "top_k", "repetition_penalty"}
    # The API key is used, but never shown in a report or stored with a vote.
    assert remote.settings.api_key == "sk-1"
    assert "api_key" not in remote.public_settings() and "sk-1" not in json.dumps(remote.describe())
    assert remote.public_settings()["api_base_url"] == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(("data", "message"), [
    ([{"label": "x"}], 'a targets file is a JSON object: {"targets": [{"label": ...}, ...]}'),
    ({"targets": []}, "targets: List should have at least 1 item"),
    ({"targets": [{"label": f"t{i}"} for i in range(MAX_TARGETS + 1)]}, "List should have at most 4 items"),
    ({"targets": [{"label": "A"}], "extra": 1}, "extra: unknown key"),
    ({"targets": [{"label": "A"}, {"label": "Hot", "sampling": {"temperature": 7}}]},
     "target 2 ('Hot'): sampling.temperature: Input should be less than or equal to 5"),
    ({"targets": [{"label": "Hot", "sampling": {"temperature": "0.5"}}]},
     "target 1 ('Hot'): sampling.temperature: Input should be a valid number"),
    ({"targets": [{"label": "A", "sampling": {"seed": 1.5}}]},
     "target 1 ('A'): sampling.seed: Input should be a valid"),
    ({"targets": [{"label": "A", "sampling": {"temprature": 0.5}}]},
     "target 1 ('A'): sampling.temprature: unknown key"),
    ({"targets": [{"label": "A", "model": {"backend": "tgi"}}]},
     "target 1 ('A'): model.backend: unknown backend 'tgi'; choose one of: hf, vllm, llamacpp, openai"),
    ({"targets": [{"label": "A", "model": {"backend": "openai", "api_base_url": "ftp://x"}}]},
     "target 1 ('A'): model.api_base_url: must be an http(s) URL"),
    ({"targets": [{"label": "A", "tool_choice": "do it"}]},
     "target 1 ('A'): tool_choice: must be auto, none, required or a tool's name, not 'do it'"),
    ({"targets": [{"label": "  "}]}, "target 1: label: String should have at least 1 character"),
    ({"targets": [{"sampling": {}}]}, "target 1: label: Field required"),
    ({"targets": [{"label": "A"}, {"label": "A", "sampling": {"seed": 1}}]},
     "target 2: the label 'A' is used twice"),
    ({"targets": ["A"]}, "targets.0: Input should be a valid dictionary"),
])
def test_a_targets_file_that_cannot_be_used_is_refused_naming_the_target_and_the_field(data, message):
    with pytest.raises(TargetsError) as raised:
        parse_targets(data, BASE)
    assert message in str(raised.value)


def test_an_unreadable_or_broken_targets_file_says_which_and_where(tmp_path):
    with pytest.raises(TargetsError, match="cannot read the targets file"):
        load_targets(tmp_path / "missing.json", BASE)
    broken = write(tmp_path, "broken.json", '{"targets": [\n  {"label": "A",}\n]}')
    with pytest.raises(TargetsError, match=r"broken.json: not valid JSON \(.* at line 2, column 17\)"):
        load_targets(broken, BASE)
    wrong = write(tmp_path, "wrong.json", '{"targets": [{"label": "A", "sampling": {"top_p": 0}}]}')
    with pytest.raises(TargetsError, match=r"wrong.json: target 1 \('A'\): sampling.top_p: Input should be greater"):
        load_targets(wrong, BASE)


def test_the_default_targets_are_the_model_at_its_defaults_and_at_another_temperature():
    first, second = default_targets(BASE)
    own = defaults_for_settings(BASE).params()
    assert first.settings == second.settings == BASE  # one engine for both
    assert first.params == own
    assert second.params == replace(own, temperature=1.0)
    assert first.label != second.label and "0.2" in first.label and "1" in second.label
    name = f"{model_folder(BASE.model_path).name} ({BASE.backend})"
    assert first.label.startswith(name) and second.label.startswith(name)  # votes are counted by label
    check_targets([first, second])
    # A model whose own default is 1.0 already gets another one; over an API the server's defaults stay its own.
    remote = ModelSettings(backend="openai", api_model="some-model")
    at_defaults, other = default_targets(remote)
    assert at_defaults.params.temperature == 0.7 and other.params.temperature == 1.0
    assert at_defaults.params.server_defaults == {"temperature", "top_p", "top_k", "repetition_penalty"}
    assert other.params.server_defaults == {"top_p", "top_k", "repetition_penalty"}


def test_targets_in_code_are_checked_too():
    with pytest.raises(TargetsError, match="1 to 4 targets, not 0"):
        check_targets([])
    with pytest.raises(TargetsError, match="target 2: the label 'A' is used twice"):
        check_targets([Target("A"), Target("A", BASE)])


# ----- prompts ------------------------------------------------------------------------------------------------------

TOOLS = ("calculator", "current_time")


def test_the_prompts_file_gives_each_prompt_its_tools_choice_and_name(tmp_path):
    path = write(tmp_path, "prompts.jsonl", "\n".join([
        json.dumps({"prompt": "Hello"}),
        "",
        json.dumps({"prompt": "17 * 23?", "tools": ["calculator"], "tool_choice": "calculator", "id": "mult"}),
        json.dumps({"prompt": "Time?", "tools": list(TOOLS), "tool_choice": "required"}),
    ]))
    plain, mult, time_ = load_prompts(path, TOOLS)
    assert (plain.prompt, plain.tools, plain.tool_choice, plain.id) == ("Hello", [], "auto", "line 1")
    assert (mult.tools, mult.tool_choice, mult.id) == (["calculator"], "calculator", "mult")
    assert (time_.tool_choice, time_.id) == ("required", "line 4")


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": "x",}', "line 2: not valid JSON"),
    ('{"text": "x"}', "line 2: prompt: Field required; text: unknown key"),
    ('{"prompt": ""}', "line 2: prompt: String should have at least 1 character"),
    ('{"prompt": "x", "tools": ["launch_rocket"]}', "line 2: unknown tool 'launch_rocket' (the tools: calculator, "
                                                    "current_time)"),
    ('{"prompt": "x", "tool_choice": "required"}', "line 2: tool_choice 'required' needs at least one tool"),
    ('{"prompt": "x", "tools": ["calculator"], "tool_choice": "current_time"}',
     "line 2: tool_choice 'current_time' is neither auto, none, required nor one of tools"),
    ('{"prompt": "x", "tools": "calculator"}', "line 2: tools: Input should be a valid list"),
    ('["x"]', "line 2: Input should be a valid dictionary"),
])
def test_a_prompt_that_cannot_be_used_is_refused_naming_its_line(tmp_path, line, message):
    path = write(tmp_path, "prompts.jsonl", '{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(PromptsError) as raised:
        load_prompts(path, TOOLS)
    assert message in str(raised.value)


def test_an_empty_or_missing_prompts_file_is_refused(tmp_path):
    with pytest.raises(PromptsError, match="no prompts"):
        load_prompts(write(tmp_path, "empty.jsonl", "\n\n"), TOOLS)
    with pytest.raises(PromptsError, match="cannot read the prompts file"):
        load_prompts(tmp_path / "missing.jsonl", TOOLS)


def test_the_examples_make_compare_runs_are_valid():
    targets = load_targets(ROOT / "examples/compare/targets.json", BASE)
    assert len(targets) == 2 and {t.settings for t in targets} == {BASE}  # one engine, the app's model
    prompts = load_prompts(ROOT / "examples/compare/prompts.jsonl", load_tools().names)
    assert any(prompt.tools for prompt in prompts) and any(not prompt.tools for prompt in prompts)
