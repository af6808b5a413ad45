"""Switchyard: an LLM gateway."""
