"""What every shard format answers: the interface of one entry of the format table
(etl.formats.shards.ADAPTER_FOR_FORMAT), after TFDS's `FileAdapter`.

A format is one adapter: its name (the job's `format:` and the manifest's "format"), its
file names, its rules (which whole-file compressions and index files it takes, and why it
refuses the others: the config layer adds only the user-facing message around the reason),
its writer (a sink the shard writer feeds framed records), its reader, its verify step and
how it is read at random. Nobody outside an adapter compares a format's name: they look the
adapter up and ask it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import numpy as np
import pyarrow as pa

# A write handle whose bytes appear at the path only once complete (the shard writer's
# attempt file: etl.shuffle.shard_writer.attempt_file).
OpenAttempt = Callable[[str], AbstractContextManager[BinaryIO]]


@dataclass(frozen=True)
class IndexFile:
    """An index file written beside a shard (etl.formats.record_index): its name, size and
    sha256, as the manifest lists them."""

    name: str
    num_bytes: int
    sha256: str


class ShardSink(Protocol):
    """One shard being written: framed records in, its size and sha256 (and index file) out."""

    num_bytes: int
    sha256: str
    index_file: IndexFile | None

    def write(self, framed: pa.Buffer, frame_sizes: np.ndarray) -> None: ...

    def finish(self) -> None: ...


class ShardAdapter:
    """One shard format; subclasses set the class attributes and the methods below."""

    name: str = ""  # the job's `format:` value, the manifest's "format"
    compressions: tuple[str, ...] = ("none",)  # whole-file compressions it takes
    compression_refused: str = ""  # why it takes no other (ends the config's message)
    index_refused: str | None = None  # why it never takes index files; None: it may
    pattern: str = ""  # a glob of its shards' file names (inspect lists a folder with it)
    position: str = "offset"  # what a record's position in a file is (inspect's label)
    by_number: bool = False  # read at random by record number, without index files
    tf_data: bool = False  # tf.data's readers read it (make_dataset)

    def suffix(self, compression: str) -> str:
        """The end of its shard file names (for this whole-file compression)."""
        raise NotImplementedError

    def is_shard(self, path: str) -> bool:
        """Whether a file of this name is one of its shards (here: a format of one suffix,
        whatever the compression; a format with several overrides it)."""
        return path.endswith(self.suffix("none"))

    def stem(self, name: str) -> str | None:
        """A shard's file name without the format's suffix; None: not one of its names."""
        return name.removesuffix(self.suffix("none")) if self.is_shard(name) else None

    def indexable(self, compression: str) -> bool:
        """Whether index files give random access to its shards (so also their default)."""
        return False

    def open_sink(self, final: str, compression: str, index: bool, attempt: OpenAttempt,
                  run_dir: str | None) -> AbstractContextManager[ShardSink]:
        """A sink writing the shard at `final` through `attempt`; `run_dir`: the run's local
        directory for scratch files (None: the temp directory)."""
        raise NotImplementedError

    def read_file(self, path: str, check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
        """(position, serialized record) of every record of one shard, local or remote."""
        raise NotImplementedError

    def verify(self, path: str, entry: dict[str, Any], check_records: bool,
               index: str | None) -> int:
        """One shard checked against its manifest entry (`index`: its index file, if any);
        its record count. VerifyError names what does not match."""
        raise NotImplementedError

    def open_random(self, path: str) -> Any:
        """A reader of one local shard by record number (`by_number` formats only)."""
        raise NotImplementedError(f"{self.name} shards are read at random through index files")
