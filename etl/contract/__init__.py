"""The schema as the single source of truth: the schema model and validation, columns and
the encoder, the parse spec and decoder, TFMD export, images and record checks.
Imports etl.base, etl.storage and etl.formats only.
"""
