"""GGUF container I/O: read headers, write files atomically, copy tensor bytes exactly."""
