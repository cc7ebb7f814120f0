"""Engines behind one `Client` protocol (client_protocol): transformers (hf/), vLLM, llama.cpp (llamacpp/) and any
OpenAI-compatible server; the backends by name (backends) and the one pool of loaded models (pool)."""
