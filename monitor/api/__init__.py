"""The HTTP API (FastAPI), the DaemonHandle protocol it reads through, and the status pages."""
