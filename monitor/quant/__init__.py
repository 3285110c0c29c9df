"""Quantized models: calibration coverage, quantization parameters, calibration methods compared.

- ``qparams.py``: a QDQ model's ``QuantizeLinear`` nodes, their scale, zero point and code range.
- ``capture.py``: the float values those nodes quantize, per sample (the tensors exposed as outputs).
- ``coverage.py``: per quantized tensor, the share of values clipped and of codes used (``onnxmon coverage``).
- ``coverage_check.py``: ``models[].checks.calibration_coverage`` and its reason ``calibration_out_of_range``.
- ``calibrate.py``: ORT's quantizer under MinMax, Entropy and Percentile, each measured (``onnxmon calibrate``).

ONNX Runtime itself is reached through ``monitor.runtime`` (sessions, ``runtime/quantizer.py``).
"""
