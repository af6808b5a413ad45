"""Sampling as a pipeline of small logits processors (vLLM v1 shaped): each validates its
parameters at admission, keeps per-row tensors rebuilt when the batch changes, and applies
to the whole batch's logits at once."""
