"""Presets: saved system prompts, sampling settings, models and tools (app/presets/preset.py), and the built-in ones."""
