"""Runs over time: input fingerprints and pins, idempotence (is an output current?),
the run history and the run log (a run's live progress is etl.run's).
Imports layers 1-6 only; never Beam.
"""
