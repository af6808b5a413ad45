"""The OpenAI-shaped APIs (OpenAI, vLLM, llama.cpp, mistral.rs, Fireworks, SGP, Azure, Mistral,
Cohere's compatibility API): the body written from the dialect tables (request.py), the answers
read back (answers.py), the codec joining them (codec.py) and a server's reported window (window.py)."""
