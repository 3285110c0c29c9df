"""The onnxruntime boundary: sessions built exactly as configured, environment snapshots."""
