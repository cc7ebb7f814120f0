"""The built-in presets do what their names say, on the embedded SmolLM2 (the model they were chosen for), applied
as the sidebar applies them over the model's own defaults: Precise gives the same answer to the same question,
Brief answers well under half as long as the defaults and mostly ends on its own, Creative draws a different
answer each time."""

from __future__ import annotations

from dataclasses import replace

from app.clients.generation_defaults import defaults_for_settings
from app.domain.generation_params import GenerationParams
from app.presets.built_in import BRIEF, CREATIVE, PRECISE
from tests.helpers import collect

QUESTIONS = ["What is photosynthesis?", "Why is the sky blue?", "How do vaccines work?"]


def _defaults(client) -> GenerationParams:
    values = defaults_for_settings(client.settings).values
    return GenerationParams(**values, max_new_tokens=300, seed=1)  # the app's 512, cut: the test's time


def _answer(client, question: str, params: GenerationParams, system: str) -> tuple[str, int, str]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    text, deltas = collect(client, messages, params)
    return text, deltas[-1].metrics.completion_tokens, deltas[-1].finish_reason


def test_precise_answers_the_same_question_the_same_way(smol_client):
    params, system = PRECISE.applied_to(replace(_defaults(smol_client), max_new_tokens=40, seed=None), "")
    assert params.temperature == 0.0
    first, second = (_answer(smol_client, "Name three colours of the rainbow.", params, system)[0] for _ in range(2))
    assert first == second and first.strip()


def test_brief_answers_well_under_half_as_long_and_mostly_ends_on_its_own(smol_client):
    base = _defaults(smol_client)
    params, system = BRIEF.applied_to(base, "")
    assert system == BRIEF.system_prompt and params.max_new_tokens == 96
    defaults = [_answer(smol_client, question, base, "") for question in QUESTIONS]
    brief = [_answer(smol_client, question, params, system) for question in QUESTIONS]
    # Measured here: 85 + 215 + 300 (cut) tokens with the defaults, 55 + 93 + 83 with Brief.
    assert sum(tokens for _, tokens, _ in brief) < 0.6 * sum(tokens for _, tokens, _ in defaults), (defaults, brief)
    # Not the 96-token cap alone: the system prompt makes answers end on their own within it, where the model's
    # defaults, cut at 96, would end one of three (the 85-token one).
    ended = sum(reason == "stop" for _, _, reason in brief)
    ended_under_cap = sum(reason == "stop" and tokens <= 96 for _, tokens, reason in defaults)
    assert ended >= 2 and ended > ended_under_cap, (defaults, brief)


def test_creative_draws_a_different_answer_each_time(smol_client):
    params, system = CREATIVE.applied_to(_defaults(smol_client), "")
    assert params.seed is None and params.temperature == 1.0 and system == CREATIVE.system_prompt
    prompt = "Write a one-sentence story about a cat."
    draws = {_answer(smol_client, prompt, replace(params, max_new_tokens=30, seed=seed), system)[0]
             for seed in (1, 2, 3)}
    assert len(draws) == 3
