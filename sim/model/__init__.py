"""The cost model's evidence: the latency profile and its calibration, the list
of unmeasured costs, and validation against published facts.
"""
