"""Rehearse an upgrade: replay every model's benchmark set on a candidate stack against production's baselines.

The candidate stack is another interpreter (``--python``) with onnxmon and the candidate ONNX
Runtime; each model is checked there exactly as ``onnxmon check`` checks it (its isolated child,
timeout, memory cap, and the diagnosis of a fail), and the results come back as JSON. They are
stored as candidate runs: shown in history, never production's verdicts, alerts or metrics.
"""
