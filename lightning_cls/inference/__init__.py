"""Inference without Lightning or Hydra."""
