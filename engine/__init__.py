"""Serving engine: config, sequences, block manager, scheduler, model runner, models."""
