"""Diagnose a drift: controlled re-runs of the failing samples, one knob at a time, and ranked causes.

``engine.diagnose`` is the entry point; ``knobs`` lists the variations, ``replay`` measures one in
its child, ``evidence`` reads what the run already knows, ``rank`` orders the hypotheses and
``result`` holds the values (``Diagnosis.to_dict()`` is the JSON shape). Nothing is imported here:
``monitor.diagnose.result`` stays light enough for the pages and the metrics.
"""
