"""Dataset statistics: what the conversion pass gathers, what `report` shows and what the
quality gate checks. `accumulators` (bounded-memory statistics of one split: SplitStats and the
per-feature accumulators), `dataset` (`stats.json`, the statistics a run gathers, and
`load_stats`), `drift` (the measures between two outputs' statistics), `document` (the
statistics document of an output: report.json's numbers, from stats.json or one read of the
shards). Rendering them is etl.tools.report's.
Imports layers 1-5 only (contract, formats, output, storage, base); never Beam.
"""
