"""The ``gguf-mtp`` command line (installed as package ``gguf_mtp_cli``)."""
