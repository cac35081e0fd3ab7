"""Prompt token counting: offline tiktoken encodings, OpenAI chat accounting, cache."""

from proxy.decide.tokens.calibration import Calibration
from proxy.decide.tokens.counter import ModelCounter, TokenCounter, encoding_for
from proxy.decide.tokens.encodings import EncodingLoader, LoadedEncoding

__all__ = [
    "Calibration",
    "EncodingLoader",
    "LoadedEncoding",
    "ModelCounter",
    "TokenCounter",
    "encoding_for",
]
