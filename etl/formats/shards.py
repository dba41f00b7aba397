"""What a shard is on disk: its container (TFRecord or ArrayRecord), whole-file compression,
whether an index file goes beside it, its name, and the one reader of its records.

The job keys `format:`, `compression:` and `index:` become one ShardFormat (etl.job.config
checks the combinations); the shard writer, the manifest and the tools ask it, so the rules
live here once. `read_shard` is the one place that yields the records of a shard of either
format (inspect and report read through it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from etl.formats import array_record
from etl.formats.tfrecord import COMPRESSIONS, compression_of, read_file

TFRECORD = "tfrecord"
ARRAY_RECORD = "array_record"
FORMATS = (TFRECORD, ARRAY_RECORD)
ARRAY_RECORD_SUFFIX = ".array_record"


def default_index(kind: str, compression: str) -> bool:
    """Index files unless told otherwise, where they give random access: uncompressed
    TFRecord shards (ArrayRecord files carry their own index; offsets into a gzip/zlib stream
    are no random access)."""
    return kind == TFRECORD and compression == "none"


@dataclass(frozen=True)
class ShardFormat:
    kind: str = TFRECORD
    compression: str = "none"
    index: bool = False  # NAME.index beside each TFRecord shard (etl.formats.record_index)

    def __post_init__(self) -> None:
        if self.kind not in FORMATS:
            raise ValueError(f"format must be one of {list(FORMATS)}, got {self.kind!r}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, "
                             f"got {self.compression!r}")
        if self.index and not default_index(self.kind, self.compression):
            raise ValueError("index files need uncompressed TFRecord shards")
        if self.kind == ARRAY_RECORD and self.compression != "none":
            raise ValueError("ArrayRecord shards take no gzip/zlib compression")

    @classmethod
    def of(cls, kind: str = TFRECORD, compression: str = "none",
           index: bool | None = None) -> ShardFormat:
        """`index` None: the default for the format and compression."""
        return cls(kind, compression, default_index(kind, compression) if index is None else index)

    @property
    def suffix(self) -> str:
        if self.kind == ARRAY_RECORD:
            return ARRAY_RECORD_SUFFIX
        return ".tfrecord" + COMPRESSIONS[self.compression]

    def shard_name(self, split: str, index: int, num_shards: int) -> str:
        return f"{split}-{index:05d}-of-{num_shards:05d}{self.suffix}"


def is_array_record(path: str) -> bool:
    return path.endswith(ARRAY_RECORD_SUFFIX)


def read_shard(path: str, check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """(position, serialized record) of every record of one shard, local or remote, of
    either format: a TFRecord file (gzip/zlib by its suffix) gives each record's byte offset
    in the uncompressed stream, an ArrayRecord file each record's index."""
    if is_array_record(path):
        yield from array_record.read_file(path)
        return
    yield from read_file(path, compression_of(path), check_crc)
