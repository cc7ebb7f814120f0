"""Knowledge page: named collections of documents, searched by full text, to answer questions from with sources."""

from __future__ import annotations

from app.frontends.streamlit import knowledge_page

knowledge_page.render()
