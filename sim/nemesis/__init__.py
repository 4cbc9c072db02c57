"""Faults: plans, the nemesis that injects them, anomaly runs and shrinking.
"""
