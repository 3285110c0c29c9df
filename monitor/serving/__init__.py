"""Models where they are served: the Open Inference Protocol runner (``client.py``), its tensors on the
wire (``wire.py``), the server's metadata as environment fields (``metadata.py``). ``tritonclient`` is
imported here only."""
