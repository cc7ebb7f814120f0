"""Composite LLM demo: one UI-agnostic core, Streamlit pages and an OpenAI-compatible server on top."""
