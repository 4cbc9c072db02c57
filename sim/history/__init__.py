"""Histories: the model, recording, traces (Arrow/Parquet), interchange with
Jepsen (EDN) and Porcupine, and the checkers that judge them.
"""
