"""What lives on disk: tensors, model identity, signatures, benchmark sets and baselines."""
