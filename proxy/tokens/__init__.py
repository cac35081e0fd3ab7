"""Prompt token counting: offline tiktoken encodings, OpenAI chat accounting, cache."""

from proxy.tokens.calibration import Calibration
from proxy.tokens.counter import ModelCounter, TokenCounter, encoding_for
from proxy.tokens.encodings import EncodingLoader, LoadedEncoding

__all__ = [
    "Calibration",
    "EncodingLoader",
    "LoadedEncoding",
    "ModelCounter",
    "TokenCounter",
    "encoding_for",
]
