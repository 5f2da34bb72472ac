"""The embedded default engine: a tiny random-weight Llama-style model, built offline, served by a real
engine (Transformers' continuous-batching server, or llama.cpp through llama-cpp-python)."""
