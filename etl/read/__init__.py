"""Reading a published output back: `make_dataset` (tf.data) driven by the output's own
schema and manifest; the home of the loaders to come.
Imports layers 1-5 (base, storage, formats, contract, output), never Beam.
"""
