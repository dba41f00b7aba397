"""One run as it happens: the progress model a running conversion feeds and a person watches
(counts, stage, percent, ETA; live bar or plain lines). Runs over time (fingerprints, the skip
rule, history) are etl.schedule's.
Imports etl.base only; never Beam.
"""
