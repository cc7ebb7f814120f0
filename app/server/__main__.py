"""`python -m app.server`: the OpenAI-compatible API server (`--help` lists its options)."""

from app.server.api import main

main()
