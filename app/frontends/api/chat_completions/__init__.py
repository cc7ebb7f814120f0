"""POST /v1/chat/completions: its request model (chat_protocol), answers (chat_answers) and route (chat_serving)."""
