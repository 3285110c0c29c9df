"""The export linter's rules, one module per family of hazards; ``lint.py`` runs them all.

``validity`` (a model ONNX Runtime refuses to load), ``training`` (BatchNormalization and Dropout
left in training mode), ``resize`` (sampling modes unlike PyTorch's ``F.interpolate``), ``batch``
(batch sizes and other dynamic dims frozen into the graph), ``versions`` (an IR version or opset
newer than the installed runtime loads), ``fp16`` (weights and activations float16 cannot hold) and
``qdq`` (quantize/dequantize groups no quantized kernel takes). Each has ``check(graph)``; a rule
that needs facts from outside the file (``versions``, ``batch.check_fixed_dims``,
``fp16.check_activations``) takes them as arguments, so the rules stay static.
"""
