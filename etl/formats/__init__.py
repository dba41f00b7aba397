"""Bytes on disk: protobuf wire encoding of Example/SequenceExample columns, TFRecord
framing and CRCs, index files, ArrayRecord files, IDX files, the one table of
tf.train.Feature storage kinds, and the shard formats: one adapter per format
(shard_adapter, tfrecord_shards, array_record_shards) in the one table of shards.
Imports etl.base and etl.storage only.
"""
