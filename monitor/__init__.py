"""onnxmon: a continuous precision monitor for ONNX models served by ONNX Runtime.

Importing this package starts nothing and registers nothing; see ``monitor.cli`` for
the command line and ``monitor.check`` for the one operation everything builds on.
"""

from __future__ import annotations

__version__ = "0.1.0"
