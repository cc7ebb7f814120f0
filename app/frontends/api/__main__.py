"""`python -m app.frontends.api`: the OpenAI-compatible API server (`--help` lists its options)."""

from app.frontends.api.server_app import main

main()
