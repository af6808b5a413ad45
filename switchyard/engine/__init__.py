"""The built-in torch engine. Importing this package does not import torch: the model lives in
a separate engine process (see ``backend.EngineBackend``)."""

from switchyard.engine.backend import EmbedderBackend, EngineBackend

__all__ = ["EmbedderBackend", "EngineBackend"]
