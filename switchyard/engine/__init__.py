"""The built-in torch engine. Importing this package does not import torch: the model lives in
a separate engine process (see ``backend.EngineBackend``)."""

from switchyard.engine.backend import EngineBackend

__all__ = ["EngineBackend"]
