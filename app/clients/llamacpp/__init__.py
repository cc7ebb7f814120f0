"""The llama.cpp backend: the client in the app (client.py) and its runner process per GGUF (runner.py, engine.py,
protocol.py), the runner's prompt cache (cache.py), a GGUF file's header (gguf_header.py), and a build of the
binding for the instructions this CPU and OS really run (cpu.py, build.py, probe.py). Nothing is imported here: the
runner and the build stay light."""
