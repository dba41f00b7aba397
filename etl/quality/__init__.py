"""Quality gates: a span's statistics against the job's `checks:` (etl.job.checks), before it
is published. `stats` (the statistics of a staged or published dataset, and of the previous
span), `evaluate` (checks -> results, one per check, split and feature) and `gate` (what a run
does with them: warn lines, or quarantine, checks.json, the page and exit 6).
Imports layers 1-7 only (the statistics and drift measures are etl.stats's; the page of a
blocked span is drawn by the report's renderer, etl.tools.report.html); never Beam.
"""
