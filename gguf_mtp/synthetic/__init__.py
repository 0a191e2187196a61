"""Synthetic checkpoints (real names and shapes, random weights) for tests, the demo and benchmarks."""

from .checkpoint import SyntheticSpec, write_checkpoint

__all__ = ["SyntheticSpec", "write_checkpoint"]
