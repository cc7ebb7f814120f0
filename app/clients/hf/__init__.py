"""The Hugging Face transformers engine: the client (`client.HFClient`), the continuous-batching decoder and its
cache (`batch`, `batch_cache`), each reply's token choice (`sampling`), incremental detokenising (`streamer`) and
grammar-constrained decoding (`grammar`, `grammar_compile`). Imports torch: loaded only when this backend is chosen
(app/clients/backends.py)."""
