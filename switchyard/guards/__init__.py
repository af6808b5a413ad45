"""Guardrails: detectors, the guards a request runs, and its text edited or refused (docs/guardrails.md)."""
