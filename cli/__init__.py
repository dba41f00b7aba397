"""The driver on top: one job run (run), date ranges (ranges), the summary, the estimate
command. It may import every package below; run_pipeline.py is its entry shim.
Nothing imports cli.
"""
