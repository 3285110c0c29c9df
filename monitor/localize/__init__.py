"""Layer by layer: exposing tensors, finding the first node that moved, QDQ SQNR, reports."""
