"""Models page: the models on this machine, recommended ones, and (when the user allows the network) a search of the
Hugging Face Hub with downloads."""

from __future__ import annotations

from app.frontends.streamlit import models_page, sidebar

models_page.render(sidebar.current().model)
