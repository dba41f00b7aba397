"""Bytes on disk: protobuf wire encoding of Example/SequenceExample columns, TFRecord
framing and CRCs, IDX files, and the one table of tf.train.Feature storage kinds.
Imports etl.base and etl.storage only.
"""
