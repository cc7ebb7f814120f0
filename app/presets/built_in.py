"""The presets every user has, chosen for the embedded SmolLM2 (and sensible for bigger models). Each is tested to do
what its name says on SmolLM2 (tests/engines/test_presets_smollm2.py): Precise answers the same question the same
way every time, Brief answers about half as long as the model's defaults and mostly ends on its own, Creative gives a
different answer for each draw."""

from __future__ import annotations

from app.presets.preset import Preset

PRECISE = Preset(
    name="Precise", temperature=0.0,
    description="The most likely words every time (greedy): the same question gets the same answer. For facts, "
                "sums and tool calls.")
BRIEF = Preset(
    name="Brief", system_prompt="Answer in one or two short sentences.", temperature=0.2, top_p=0.9,
    max_new_tokens=96,
    description="Short answers: a system prompt that asks for one or two sentences, and at most 96 tokens. "
                "SmolLM2's card sampling (temperature 0.2, top p 0.9).")
CREATIVE = Preset(
    name="Creative", system_prompt="You are an imaginative writer. Write vivid, original stories, poems and ideas.",
    temperature=1.0, top_p=0.95, top_k=0, repetition_penalty=1.1, max_new_tokens=768, seed=None,
    description="Varied, longer writing: a writer's system prompt, temperature 1, top p 0.95, a light repetition "
                "penalty and a fresh draw each time.")

BUILT_IN: tuple[Preset, ...] = (PRECISE, BRIEF, CREATIVE)
