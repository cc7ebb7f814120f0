"""The OpenAI-compatible HTTP API over the same core as the pages (`python -m app.frontends.api`, `make serve`).

`api` builds the FastAPI app from one `ServerSettings` (app/config.py) and serves it (`main`). Each endpoint family
is a module of its own (`chat_completions`), over request types in `protocol`, typed answers in `answers` and the
generations in flight of `generations`; a new endpoint family is a new module here, registered in `api.create_app`.
`model_holder` loads the one backend (into app/clients/pool.py's ClientPool), `middleware` checks the key and the
body's size, `errors` answers every failure in OpenAI's shape, and `metrics` counts for /metrics."""
