"""The architecture comparison: passes, statistics, the report, ablation and
sensitivity.
"""
