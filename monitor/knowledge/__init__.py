"""The knowledge base: built-in rules (``rules.yaml``, package data) and incidents noted by people.

``rules`` loads and matches the shipped rules; ``incidents`` computes a failure's signature and
finds the noted incidents that look like it. Pure data and the standard library plus PyYAML: the
store keeps the incidents, this package only compares them.
"""
