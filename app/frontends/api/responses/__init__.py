"""The Responses API: request model (responses_protocol), output items and events (responses_output), routes
(responses_serving)."""
