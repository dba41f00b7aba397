"""Commands around an output: infer-schema (infer/), the dataset report (report/: it renders
and writes the statistics of etl.stats) and inspect_output (the `inspect` command); each
reads through the contract and output packages.
Imports layers 1-6 only.
"""
