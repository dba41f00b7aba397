"""Runs over time: input fingerprints and pins, idempotence (is an output current?),
the run history, the run log and the progress model.
Imports layers 1-6 only; never Beam.
"""
