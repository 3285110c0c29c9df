"""Pure numpy: the metric suite and the tolerance rule (see outputs.py)."""
