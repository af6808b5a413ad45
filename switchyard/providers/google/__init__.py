"""Google's Gemini API, by API key (gemini.py) or through Vertex AI (vertex.py, OAuth): the codec
(gemini.py), its answers (answers.py) and embeddings (embed.py)."""
