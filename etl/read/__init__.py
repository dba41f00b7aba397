"""Reading a published output back, driven by the output's own schema and manifest:
`dataset` (make_dataset, tf.data), `random_access` (open_records: records by number through
the index files, without TensorFlow, for Grain and PyTorch), `decode` (serialized records ->
NumPy from the schema's features), `torch_dataset` (a PyTorch Dataset and collate).
Imports layers 1-5 (base, storage, formats, contract, output), never Beam.
"""
