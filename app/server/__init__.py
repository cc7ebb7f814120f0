"""The OpenAI-compatible HTTP API over the same core as the pages (`python -m app.server`, `make serve`).

`api` builds the FastAPI app and its routes from one `ServerSettings`; each endpoint family has a module of its own
(`chat_completions`), over request types in `protocol` and typed answers in `answers`; `metrics` counts for
/metrics. A new endpoint family is a new module here, registered in `api.create_app`."""
