"""Prompt text in and out of a model: `process_input` / `process_response` (chat_format), the tool-call dialects,
thinking blocks, stop strings, partial matches at a stream's end and code fences."""
