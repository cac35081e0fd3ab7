"""Model context windows: built-in table, config overrides, upstream discovery."""

from proxy.decide.windows.discovery import fetch_model_windows, parse_models_listing
from proxy.decide.windows.registry import ModelInfo, WindowRegistry

__all__ = ["ModelInfo", "WindowRegistry", "fetch_model_windows", "parse_models_listing"]
