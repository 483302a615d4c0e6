"""Attention readout backends: they return the cue rows of the selected heads over all keys."""

from .transformers import ReadoutCapture, TransformersBackend, cue_attention_rows

__all__ = ["ReadoutCapture", "TransformersBackend", "cue_attention_rows"]
