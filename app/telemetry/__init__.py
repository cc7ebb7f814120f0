"""Traces of what the app does, on OpenTelemetry with its GenAI semantic conventions: spans for each turn, model
call and tool call (spans.py), exported over OTLP only when the standard OTEL_* variables ask for it (setup.py), and
kept in memory for the app's own timeline under each answer (timeline.py)."""
