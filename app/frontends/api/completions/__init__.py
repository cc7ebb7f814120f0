"""POST /v1/completions: legacy text completions, request and route in completions_serving."""
