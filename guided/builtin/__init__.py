"""What the project builds for itself, offline: tokenizers (its own byte-level BPE and conversions of
tokenizer files) and tiny random-weight models."""

from guided.builtin.tiny_model import TinyModelSpec, default_model_dir, tiny_model_dir, write_tiny_model
from guided.builtin.tokenizers import load_tokenizer

__all__ = ["TinyModelSpec", "default_model_dir", "load_tokenizer", "tiny_model_dir", "write_tiny_model"]
