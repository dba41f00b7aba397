"""The job file: its config and validation, date spans and placeholders, the read plan
(files and byte ranges to read), and the launch estimate.
Imports layers 1-5 only.
"""
