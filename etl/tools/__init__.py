"""Commands around an output: infer-schema (infer/), the dataset report (report/) and
inspect; each reads through the contract and output packages.
Imports layers 1-5 only.
"""
