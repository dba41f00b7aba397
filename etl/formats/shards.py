"""What a shard is on disk: the one table of shard formats (`ADAPTER_FOR_FORMAT`, after
TFDS's file_adapters), a shard's format settings (`ShardFormat`: format, whole-file
compression, index files), the rules of their combinations, and the one reader of a shard.

Each format is one adapter (etl.formats.shard_adapter: writer, reader, verify, random
access, names, rules) in a module of its own; this table is the only place that lists them.
The job keys `format:`, `compression:` and `index:` become one ShardFormat; the config layer
asks `format_problem` and only words the message; the shard writer, the manifest, the
readers and the tools look the adapter up here (by name or by a shard's file name) and ask
it, so no caller compares a format's name. `read_shard` is the one place that yields the
records of a shard of any format (inspect and report read through it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from etl.formats import array_record_shards, tfrecord_shards
from etl.formats.shard_adapter import ShardAdapter
from etl.formats.tfrecord import COMPRESSIONS

ADAPTER_FOR_FORMAT: dict[str, ShardAdapter] = {
    tfrecord_shards.NAME: tfrecord_shards.ADAPTER,
    array_record_shards.NAME: array_record_shards.ADAPTER,
}
DEFAULT_FORMAT = tfrecord_shards.NAME  # a job without `format:`, a manifest without "format"


class UnknownFormat(ValueError):
    """A format name the table does not hold."""


def adapter_for(kind: str | None) -> ShardAdapter:
    """The adapter of a format name (None: the default format)."""
    adapter = ADAPTER_FOR_FORMAT.get(DEFAULT_FORMAT if kind is None else kind)
    if adapter is None:
        raise UnknownFormat(f"format must be one of {list(ADAPTER_FOR_FORMAT)}, got {kind!r}")
    return adapter


def adapter_of(path: str) -> ShardAdapter:
    """The adapter of a shard by its file name; a name no format claims reads as the
    default format's (inspect reads any TFRecord file)."""
    for name, adapter in ADAPTER_FOR_FORMAT.items():
        if name != DEFAULT_FORMAT and adapter.is_shard(path):
            return adapter
    return ADAPTER_FOR_FORMAT[DEFAULT_FORMAT]


def tf_data_reads(kind: object) -> bool:
    """Whether tf.data's readers read shards of this format (a manifest's "format")."""
    adapter = ADAPTER_FOR_FORMAT.get(kind) if isinstance(kind, str) else None
    return adapter is not None and adapter.tf_data


def is_shard_name(path: str) -> bool:
    """Whether any format claims a file of this name as its shard."""
    return any(adapter.is_shard(path) for adapter in ADAPTER_FOR_FORMAT.values())


def shard_stem(name: str) -> str | None:
    """A shard's file name without its format's suffix; None: no format's name."""
    for adapter in ADAPTER_FOR_FORMAT.values():
        stem = adapter.stem(name)
        if stem is not None:
            return stem
    return None


@dataclass(frozen=True)
class FormatProblem:
    """A combination of the shard keys that cannot work: which rule, and the format's reason.
    `rule`: "format" (unknown), "compression" (the format takes none), "index" (the format
    takes no index files), "index_compression" (index files need an uncompressed shard)."""

    rule: str
    reason: str = ""


def format_problem(kind: object, compression: str, index: bool) -> FormatProblem | None:
    """The first rule `format:`/`compression:`/`index:` break, None when they work."""
    adapter = ADAPTER_FOR_FORMAT.get(kind) if isinstance(kind, str) else None
    if adapter is None:
        return FormatProblem("format")
    if compression not in adapter.compressions:
        return FormatProblem("compression", adapter.compression_refused)
    if index and adapter.index_refused is not None:
        return FormatProblem("index", adapter.index_refused)
    if index and not adapter.indexable(compression):
        return FormatProblem("index_compression")
    return None


def default_index(kind: str, compression: str) -> bool:
    """Index files unless told otherwise, where they give random access (the format's rule:
    uncompressed TFRecord shards; ArrayRecord files carry their own index)."""
    return adapter_for(kind).indexable(compression)


@dataclass(frozen=True)
class ShardFormat:
    kind: str = DEFAULT_FORMAT
    compression: str = "none"
    index: bool = False  # NAME.index beside each shard (etl.formats.record_index)

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, "
                             f"got {self.compression!r}")
        problem = format_problem(self.kind, self.compression, self.index)
        if problem is not None:
            raise ValueError(_refusal(self, problem))

    @classmethod
    def of(cls, kind: str = DEFAULT_FORMAT, compression: str = "none",
           index: bool | None = None) -> ShardFormat:
        """`index` None: the default for the format and compression."""
        return cls(kind, compression, default_index(kind, compression) if index is None else index)

    @property
    def adapter(self) -> ShardAdapter:
        return ADAPTER_FOR_FORMAT[self.kind]

    @property
    def suffix(self) -> str:
        return self.adapter.suffix(self.compression)

    def shard_name(self, split: str, index: int, num_shards: int) -> str:
        return f"{split}-{index:05d}-of-{num_shards:05d}{self.suffix}"


def _refusal(fmt: ShardFormat, problem: FormatProblem) -> str:
    if problem.rule == "format":
        return f"format must be one of {list(ADAPTER_FOR_FORMAT)}, got {fmt.kind!r}"
    reason = problem.reason or "index files need uncompressed shards"
    return (f"{fmt.kind} shards with compression {fmt.compression!r} and index {fmt.index}: "
            f"{reason}")


def read_shard(path: str, check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """(position, serialized record) of every record of one shard, local or remote, of
    any format (its adapter by the file name): a TFRecord file (gzip/zlib by its suffix)
    gives each record's byte offset in the uncompressed stream, an ArrayRecord file each
    record's index."""
    yield from adapter_of(path).read_file(path, check_crc)
