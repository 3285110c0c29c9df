"""The fleet vote (docs/fleet.md): nodes that run one model on one stack should compute the same bits.

``lint.py`` names the settings that make a group's digests incomparable (with the fix), ``vote.py``
forms the groups (model x stack key, each node's latest run) and finds the outvoted nodes, exactly or
within a tolerance, ``attribute.py`` says what an outvoted node is (``transient``, ``suspect_hardware``,
``stack``) from a re-run of its differing samples, ``report.py`` reads the store and assembles what
``onnxmon fleet``, the API, the page and the metrics show, and ``own.py`` is a daemon's vote for its own
node after its check.
"""
