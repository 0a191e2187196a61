"""Synthetic checkpoints (real names and shapes, random weights) for tests and benchmarks; not shipped in the wheel."""

from .checkpoint import WRITERS, SyntheticSpec, write_checkpoint

__all__ = ["WRITERS", "SyntheticSpec", "write_checkpoint"]
