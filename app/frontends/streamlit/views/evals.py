"""Evals page: eval sets made from the app's own turns (or written by hand), run on the model, with regressions."""

from __future__ import annotations

from app.frontends.streamlit import evals_page

evals_page.render()
