"""Bytes on disk: protobuf wire encoding of Example/SequenceExample columns, TFRecord
framing and CRCs, index files, ArrayRecord files, what a shard is (shards), IDX files, and
the one table of tf.train.Feature storage kinds.
Imports etl.base and etl.storage only.
"""
