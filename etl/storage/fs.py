"""The one seam for file access: local paths use the OS (atomic renames, fsync), anything
with a scheme (gs://, s3://, ...) goes through Beam's FileSystems, imported only when needed.
No other module tests for "://", opens a data file or imports FileSystems: job files, schema
files, vocabularies, source globs, shards, manifests and markers all come through here, so a
path that works on disk works in a bucket. Path arithmetic (join, dirname, resolve) is plain
string work for remote paths and never imports Beam.

With STORAGE_EMULATOR_HOST set (a GCS emulator) Beam's ~25 s credential lookup is skipped in
every process that touches gs:// (see _skip_credentials_for_emulator).

A failed local write, rename or delete raises StorageError naming the path and what to do
(disk full, permission, read-only, I/O), never a bare OSError without a path: the
message reaches the user even from inside a Beam worker (etl.base.worker_errors)."""

from __future__ import annotations

import errno
import io
import os
import posixpath
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, TextIO

from etl.base.worker_errors import storage_error
from etl.storage import object_store
from etl.storage.direct_file import WRITE_SLICE, DirectFile
from etl.storage.tree_removal import remove_trees

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_remote(path: str | os.PathLike[str]) -> bool:
    """A path with a scheme (gs://, s3://, ...): Beam's FileSystems handle it."""
    return bool(_SCHEME.match(os.fspath(path)))


# ---- what a caller asks of a path's storage (instead of testing for a scheme itself) --------
# Where an *output* lives (a local directory or a gs:// prefix) is asked once, where its path
# becomes an etl.output.place.OutputPlace; these answer the questions about any other path.
def local_path(path: str) -> str | None:
    """`path` when it names this machine's disk (the OS can open, stat, mmap or lock it), None
    for an object in a store."""
    return None if is_remote(path) else path


def on_disk(path: str) -> bool:
    """An absolute path on this machine's disk: what os.stat/os.listdir may be asked about. A
    store's object is not, nor a relative pseudo-path (a python source's `python:...`)."""
    return not is_remote(path) and os.path.isabs(path)


def is_absolute(path: str) -> bool:
    """A store's URL or an absolute local path: what resolving against a folder leaves alone."""
    return is_remote(path) or os.path.isabs(path)


def renames(path: str) -> bool:
    """Files at `path` can be renamed atomically (a local file system): written under another
    name and renamed into place. Object stores have no rename: an object appears whole when
    its upload completes, and a whole dataset by writing one pointer."""
    return not is_remote(path)


def reachable_elsewhere(path: str) -> bool:
    """Other machines (a remote runner's workers) can open `path`: an object store's URL, not a
    file on this machine's disk."""
    return is_remote(path)


def same_storage(a: str, b: str) -> bool:
    """`a` and `b` are both on this machine's disk or both in an object store."""
    return is_remote(a) == is_remote(b)


def same_path(a: str, b: str) -> bool:
    """`a` and `b` name one place: local paths after resolving links, URLs by their names."""
    if is_remote(a) or is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def not_found(path: str, error: OSError) -> bool:
    """`error`, raised reading `path`, means it does not exist (an object store says so its own
    way: asked again)."""
    return isinstance(error, FileNotFoundError) or (is_remote(path) and not exists(path))


def put_new(store: object_store.Store, src: str, dst: str) -> None:
    """Create the object `dst` from `src`, a local file (uploaded) or another object (copied
    in the store); Conflict when `dst` exists with other bytes."""
    if is_remote(src):
        store.copy_new(src, dst)
    else:
        store.upload_new(src, dst)


def _split_remote(path: str) -> tuple[str, str]:
    """"gs://bucket/a/b" -> ("gs://", "bucket/a/b")."""
    m = _SCHEME.match(path)
    assert m is not None
    return m.group(0), path[m.end():]


# ---- path arithmetic (no I/O; remote paths never import Beam for it) --------------------------
def abspath(path: str) -> str:
    """Local paths made absolute; remote paths are absolute already."""
    return path if is_remote(path) else os.path.abspath(path)


def within(path: str, root: str) -> bool:
    """`path` is `root` or inside it: local paths compared after resolving links (realpath),
    remote ones by their names."""
    if is_remote(path) != is_remote(root):
        return False
    if is_remote(path):
        a, b = path.rstrip("/"), root.rstrip("/")
        return a == b or a.startswith(b + "/")
    a, b = os.path.realpath(path), os.path.realpath(root)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def dirname(path: str) -> str:
    """The folder of a file: "gs://b/jobs/job.yaml" -> "gs://b/jobs", "gs://b/x" -> "gs://b"."""
    if not is_remote(path):
        return os.path.dirname(path)
    scheme, rest = _split_remote(path)  # like os.path.dirname: "gs://b/d/" -> "gs://b/d"
    return scheme + rest.rsplit("/", 1)[0] if "/" in rest else scheme + rest


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] if is_remote(path) else os.path.basename(path)


def resolve(base_dir: str, path: str) -> str:
    """`path` as written in a job or schema file, made usable: absolute and remote paths stay,
    relative ones are taken against `base_dir` (the file's own folder, local or remote) and
    normalised ("../data" works in a bucket as on disk, but never leaves the bucket)."""
    if is_remote(path) or os.path.isabs(path):
        return path
    if not is_remote(base_dir):
        return os.path.normpath(os.path.join(base_dir, path))
    scheme, rest = _split_remote(base_dir.rstrip("/"))
    bucket = rest.split("/", 1)[0]
    key = posixpath.normpath(posixpath.join("/" + rest, path))  # "/bucket/..." keeps ".." in
    if not (key + "/").startswith("/" + bucket + "/"):
        raise ValueError(f"{path!r} relative to {base_dir!r} leaves the bucket {bucket!r}")
    return scheme + key[1:]


@contextmanager
def guarded(path: str, action: str = "writing") -> Iterator[None]:
    """OSError (with an errno) -> StorageError naming `path`."""
    try:
        yield
    except OSError as e:
        if e.errno is None:
            raise
        raise storage_error(e, path, action) from e


def _fs() -> Any:
    """Beam's FileSystems, imported on first use of a path with a scheme (in every process
    that needs it: the CLI, the launcher, each Beam worker)."""
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    try:  # gs:// too where a run's Beam import left its GCS file system out (cli/lean_imports)
        import apache_beam.io.gcp.gcsfilesystem  # noqa: F401, PLC0415
    except ImportError:  # apache-beam without its [gcp] extra
        pass
    _skip_credentials_for_emulator()
    if getattr(FileSystems, "_pipeline_options", None) is None:
        use_options(None)
    return FileSystems


def use_options(options: Any) -> None:
    """Beam pipeline options for this process's file access before (or without) a pipeline.

    Beam's S3 and Azure file systems refuse to work without pipeline options (a pipeline sets
    them when it is built); with none given, empty ones let their clients take endpoint and
    credentials from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...). A launcher
    that reads or lists inputs before building its pipeline passes the user's options here
    (--s3_endpoint_url and the like)."""
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    FileSystems.set_options(options if options is not None else PipelineOptions([]))


def _skip_credentials_for_emulator() -> None:
    """With STORAGE_EMULATOR_HOST set, tell Beam there are no credentials to look up.

    Beam's gs:// client first asks for application default credentials and retries that
    for ~25 s per process before it falls back to an anonymous client. An emulator has no
    credentials (and needs none), so that wait is pure loss: every CLI run, `verify` and
    worker process would pay it. Setting Beam's cached answer to "no credentials" makes it
    build the anonymous client at once, which honours STORAGE_EMULATOR_HOST. Beam keeps this
    cache per process (private API, apache_beam.internal.gcp.auth); against the real service
    (no STORAGE_EMULATOR_HOST) nothing changes."""
    if not os.environ.get("STORAGE_EMULATOR_HOST"):
        return
    try:
        from apache_beam.internal.gcp import auth  # noqa: PLC0415
    except ImportError:  # Beam without its gcp extra: no gs:// and nothing to skip
        return
    with auth._Credentials._credentials_lock:
        if not auth._Credentials._credentials_init:
            auth._Credentials._credentials = None
            auth._Credentials._credentials_init = True


def join(base: str, *parts: str) -> str:
    """`base`/`parts`; for remote paths the plain string join Beam's file systems do."""
    if not is_remote(base):
        return os.path.join(base, *parts)
    path = base
    for part in parts:
        path = path + part if path.endswith("/") else path + "/" + part
    return path


# ---- reading -------------------------------------------------------------------------------
def open_read(path: str) -> BinaryIO:
    """Binary read handle. A missing remote object raises FileNotFoundError and any other
    remote failure an OSError naming the path, like local files (callers catch OSError)."""
    if not is_remote(path):
        return open(path, "rb")
    try:
        return _fs().open(path, compression_type="uncompressed")
    except OSError:
        raise
    except Exception as e:  # the object store's own exceptions (google.api_core, botocore...)
        if getattr(e, "code", None) == 404 or type(e).__name__ in ("NotFound", "NoSuchKey"):
            raise FileNotFoundError(errno.ENOENT, "no such object", path) from e
        raise OSError(errno.EIO, f"{type(e).__name__}: {e}", path) from e


def open_text(path: str) -> io.TextIOWrapper:
    """UTF-8 text read handle (job files, schema files, vocabularies)."""
    return io.TextIOWrapper(open_read(path), encoding="utf-8")


def read_text(path: str) -> str:
    with open_text(path) as fh:
        return fh.read()


def read_text_as(path: str, what: str, error: type[Exception], limit: int | None = None) -> str:
    """A small text file the user named (job, schema, vocabulary): a missing or unreadable
    one raises `error` with one line naming it, e.g. "cannot read schema file 'x': no such file".
    With `limit`, at most that many characters are read: a longer file (or `/dev/zero`, which
    never ends) is refused before it fills the memory."""
    try:
        if limit is None:
            return read_text(path)
        with open_text(path) as fh:
            text = fh.read(limit + 1)
        if len(text) > limit:
            raise error(f"cannot read {what} {path!r}: it is longer than {limit:,} characters, "
                        f"more than a {what} may be")
        return text
    except FileNotFoundError as e:
        raise error(f"cannot read {what} {path!r}: no such file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"cannot read {what} {path!r}: {first_line(e)}") from e


def first_line(e: BaseException) -> str:
    """An exception's first line (library errors can run to many)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def open_local_log(path: str) -> TextIO:
    """A local text file opened for appending, its folder created (a run's log: always on
    the launcher's disk, whatever the output is, so it can be written while the run fails)."""
    if is_remote(path):
        raise ValueError(f"a log file must be local, got {path}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return open(path, "a", encoding="utf-8")  # noqa: SIM115 - the caller closes it


def open_write(path: str, durable: bool = True, bypass_cache: bool = False) -> BinaryIO:
    """Write handle; `durable` local files are fsynced on close (temp spills skip it).
    `bypass_cache`: a large durable file written once (a shard) goes straight to the disk
    with O_DIRECT where the file system allows it (see etl.storage.direct_file)."""
    if is_remote(path):
        return _fs().create(path, mime_type="application/octet-stream",
                            compression_type="uncompressed")
    with guarded(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if bypass_cache and durable:
        direct = DirectFile.open(path, guarded)
        if direct is not None:
            return direct  # type: ignore[return-value]
    return _SyncedFile(path, durable)  # type: ignore[return-value]


class _SyncedFile:
    """A local file, fsynced on close when `durable` (a published shard survives a power
    cut); write errors name the path. Large writes reach the kernel in WRITE_SLICE pieces."""

    def __init__(self, path: str, durable: bool = True):
        self.path = path
        self._durable = durable
        with guarded(path):
            self._fh = open(path, "wb")

    def write(self, data: Any) -> int:
        """`data`: bytes or any contiguous buffer (pa.Buffer, a NumPy array, a memoryview)."""
        view = memoryview(data).cast("B")
        with guarded(self.path):
            for at in range(0, len(view), WRITE_SLICE):
                self._fh.write(view[at : at + WRITE_SLICE])
        return len(view)

    def close(self) -> None:
        if self._fh.closed:
            return
        try:
            with guarded(self.path):
                self._fh.flush()
                if self._durable:
                    os.fsync(self._fh.fileno())
        finally:
            try:
                self._fh.close()
            except OSError:
                pass  # the flush above already failed and said why

    def __enter__(self) -> _SyncedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_bytes(path: str, data: bytes, durable: bool = True) -> None:
    """`durable`: fsynced on close (local); temp files that a crash may lose skip it."""
    with open_write(path, durable=durable) as fh:
        fh.write(data)


def read_bytes(path: str) -> bytes:
    with open_read(path) as fh:
        return fh.read()


def exists(path: str) -> bool:
    """A file (remote: an object; a bare prefix is not one, see isdir)."""
    return _fs().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    """A local directory, or a remote prefix with at least one object below it (object
    stores have no directories: "gs://b/out" is a folder when "gs://b/out/x" exists)."""
    if not is_remote(path):
        return os.path.isdir(path)
    try:
        found = _fs().match([path.rstrip("/") + "/**"], limits=[1])[0].metadata_list
    except OSError:
        return False  # no such bucket
    return bool(found)


def expand(patterns: str | list[str]) -> list[str]:
    """Files matching globs, sorted, de-duplicated: source paths of a job.

    Local and remote alike go through Beam's matcher, so a job means the same files on disk
    and in a bucket: `*` and `?` stay within one folder, `**` crosses folders, names starting
    with a dot match too. A missing bucket raises OSError."""
    if isinstance(patterns, str):
        patterns = [patterns]
    found: set[str] = set()
    remote = [p for p in patterns if is_remote(p)]
    for pattern in patterns:
        if not is_remote(pattern):
            found.update(_local_match(pattern))
    if remote:
        for result in _fs().match(remote):
            found.update(m.path for m in result.metadata_list)
    return sorted(found)


def _local_match(pattern: str) -> list[str]:
    """Beam's local matcher (apache_beam.io.filesystem.FileSystem.match with LocalFileSystem,
    Beam 2.77) without importing Beam, which costs ~1 s of start-up that a run listing only
    local files need not pay (a rerun that finds its output current). Same listing, same
    pattern translation; tests/test_fs.py compares both on a tree of awkward names."""
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    prefix = re.match(r"^[^[*?]*", pattern)
    assert prefix is not None
    if prefix.group(0) == pattern:  # no glob: the path itself, if it exists
        return [pattern] if os.path.exists(pattern) else []
    root = os.path.dirname(prefix.group(0))
    if not os.path.exists(root):
        return []
    wanted = re.compile(_translate_pattern(pattern))
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if wanted.match(path):
                found.append(path)
    return found


def _translate_pattern(pattern: str) -> str:
    """A glob as a regex, as Beam translates it: `*` stays in one folder, `**` crosses them
    (FileSystem.translate_pattern, based on Python 2.7's fnmatch.translate; PSF license)."""
    i, n, res = 0, len(pattern), ""
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                res += ".*"
                i += 1
            else:
                res += r"[^/\\]*"
        elif c == "?":
            res += "."
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                res += r"\["
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                res = f"{res}[{stuff}]"
        else:
            res += re.escape(c)
    return r"(?ms)" + res + r"\Z"


def match(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of files matching a glob, sorted; the same glob rules as `expand`."""
    if is_remote(pattern):
        found = _fs().match([pattern])[0].metadata_list
        return sorted((m.path, m.size_in_bytes) for m in found)
    return sorted((p, os.path.getsize(p)) for p in _local_match(pattern) if os.path.isfile(p))


def list_dir(prefix: str) -> list[tuple[str, int]]:
    """Every file below a directory/prefix (recursive), as (path, size)."""
    if is_remote(prefix):
        return match(prefix.rstrip("/") + "/**")
    out = []
    for root, _, files in os.walk(prefix):
        out.extend((os.path.join(root, f), os.path.getsize(os.path.join(root, f))) for f in files)
    return sorted(out)


def list_stats(prefix: str) -> dict[str, tuple[int, int, int]]:
    """Local: every file below a directory (recursive, links not followed) by its path relative
    to `prefix`, as (size, modification time in ns, inode) from lstat: what a published
    output's seal records and the skip rule compares (etl.output.manifest.seal), one stat per
    entry and no byte read."""
    out: dict[str, tuple[int, int, int]] = {}
    base = prefix.rstrip(os.sep) + os.sep
    for root, _, files in os.walk(prefix):
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # gone since the walk listed it: missing, as the caller will say
            out[path[len(base):]] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def set_mtime_ns(path: str, mtime_ns: int) -> int:
    """Local: set a file's modification time; returns the one the file system kept (coarser
    clocks round it), so a caller can record a value a later stat gives back exactly."""
    with guarded(path, "setting the modification time of"):
        os.utime(path, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
        return os.lstat(path).st_mtime_ns


def mtime_ns(path: str) -> int | None:
    """Local: a file's modification time in ns (lstat), None when it is not there."""
    try:
        return os.lstat(path).st_mtime_ns
    except FileNotFoundError:
        return None


def delete_tree(path: str) -> None:
    if is_remote(path):
        files = [p for p, _ in list_dir(path)]
        if files:
            _fs().delete(files)
        return
    with guarded(path, "removing"):
        remove_trees([path])  # a file, or a folder with everything in it


def delete(paths: list[str]) -> None:
    remote = [p for p in paths if is_remote(p)]
    if remote:
        _fs().delete(remote)
    for p in paths:
        if not is_remote(p) and os.path.lexists(p):
            with guarded(p, "removing"):
                os.remove(p)


def rename(src: str, dst: str) -> None:
    if is_remote(src):
        _fs().rename([src], [dst])
    else:
        with guarded(dst, f"renaming {src} to"):
            os.replace(src, dst)


def not_a_file(path: str) -> str | None:
    """What a local path is when it is no regular file ("a directory", "a FIFO (named pipe)",
    ...), else None (also for a remote object, and for a path gone since it was listed: the
    read says so). Symlinks are followed: what matters is what a read would open. An input
    must be a file: a FIFO or a device never ends (or blocks forever), a directory cannot be
    read as one."""
    if is_remote(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "no regular file")


def size(path: str) -> int:
    if is_remote(path):
        return _fs().match([path])[0].metadata_list[0].size_in_bytes
    return os.path.getsize(path)


# ---- ranged reads (random access through an index) ------------------------------------------
def identity(path: str, store: Any = None) -> tuple[int, ...] | None:
    """What changes when `path` is replaced or rewritten, from one stat (no read): local
    (device, inode, size, mtime ns, ctime ns); gs:// (generation, size; through `store`, an
    object_store.Store, when given); other schemes (size,). None when it does not exist. A
    reader pins a file with it (etl.read.random_access)."""
    if path.startswith("gs://"):
        info = (store or object_store.Store()).stat(path)
        return None if info is None else (info.generation, info.size)
    if is_remote(path):
        return (size(path),) if exists(path) else None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise storage_error(e, path, "reading") from e
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class RangedFile:
    """Byte ranges of one file, for random access to records (etl.read.random_access).

    Pinned: `open()` (or the first read) opens the file once and every later read is of that
    very file: locally an open descriptor (a file renamed away or replaced by a republish is
    still the one read), on gs:// the object's generation (a replaced object is not read;
    reading a deleted generation raises FileNotFoundError). Local ranges are read with
    os.pread, never a memory map: a file truncated while open gives a short read, an OSError
    naming the file, where a mapped slice past the new end would kill the process (SIGBUS).
    Ranges less than a gap apart share one read (local: LOCAL_COALESCE, a page; gs://:
    COALESCE, one ranged GET per run: Beam's gs:// handle fetches 16 MiB per seek, a
    sequential reader's buffer, which would make each random record cost 16 MiB). Other
    schemes: Beam's handle, seek + read. Opened in the process that reads (a DataLoader worker
    opens its own): instances are not meant to be pickled. Safe to read from several threads
    (Grain's reader threads): opening, and a seek + read on a Beam handle, take a lock."""

    COALESCE = 64 * 1024
    LOCAL_COALESCE = 4096

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._generation: int | None = None
        self._size: int | None = None
        self._handle: Any = None
        self._store: Any = None
        self._lock = threading.Lock()

    def open(self) -> int:
        """Open and pin the file (once); its size in bytes at that moment."""
        if self._size is None:
            with self._lock:
                if self._size is None:
                    self._size = self._open()
        return self._size

    def _open(self) -> int:
        if not is_remote(self.path):
            with guarded(self.path, "reading"):
                fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    n = os.fstat(fd).st_size
                except BaseException:
                    os.close(fd)
                    raise
            self._fd = fd
            return n
        if self.path.startswith("gs://"):
            self._store = object_store.Store()
            info = self._store.stat(self.path)
            if info is None:
                raise FileNotFoundError(errno.ENOENT, "no such object", self.path)
            self._generation = info.generation
            return info.size
        return size(self.path)

    def read(self, offsets: Any, lengths: Any) -> list[bytes]:
        """The bytes of each (offset, length) range, in the order given; OSError (EIO, naming
        the file) when the file ends before a range does."""
        self.open()
        if self._fd is not None:
            return self._read_local(offsets, lengths)
        starts = [int(o) for o in offsets]
        sizes = [int(n) for n in lengths]
        gap = self.COALESCE
        out: list[bytes] = [b""] * len(starts)
        order = sorted(range(len(starts)), key=starts.__getitem__)
        i = 0
        while i < len(order):  # runs of nearby ranges, one read each
            j = i + 1
            end = starts[order[i]] + sizes[order[i]]
            while j < len(order) and starts[order[j]] - end < gap:
                end = max(end, starts[order[j]] + sizes[order[j]])
                j += 1
            base = starts[order[i]]
            data = self._remote(base, end - base)
            if len(data) != end - base:
                raise OSError(errno.EIO, f"short read: {len(data)} of {end - base} bytes at "
                                         f"offset {base} (the file is shorter than when it "
                                         "was opened: truncated?)", self.path)
            if i + 1 == j and len(data) == sizes[order[i]]:
                out[order[i]] = data
            else:
                for k in order[i:j]:
                    out[k] = data[starts[k] - base: starts[k] - base + sizes[k]]
            i = j
        return out

    def _read_local(self, offsets: Any, lengths: Any) -> list[bytes]:
        """One os.pread per run of ranges less than LOCAL_COALESCE apart (found with NumPy:
        the per-range Python work is the pread and, in a shared run, a slice). NumPy is
        imported here: the commands that only list, copy or read whole files (history,
        verify --quick) do not load it."""
        import numpy as np  # noqa: PLC0415 - see above

        starts = np.asarray(offsets, np.int64).reshape(-1)
        sizes = np.asarray(lengths, np.int64).reshape(-1)
        n = len(starts)
        out: list[bytes] = [b""] * n
        if not n:
            return out
        if n == 1:  # one record (`records[i]`): no grouping
            start, length = int(starts[0]), int(sizes[0])
            with guarded(self.path, "reading"):
                data = os.pread(self._fd, length, start)  # type: ignore[arg-type]
                if len(data) != length:
                    data = self._pread_rest(data, start, length)
            if len(data) != length:
                raise OSError(errno.EIO, f"short read: {len(data)} of {length} bytes at offset "
                                         f"{start} (the file is shorter than when it was "
                                         "opened: truncated?)", self.path)
            return [data]
        order = np.argsort(starts, kind="stable")
        lo = starts[order]
        hi = lo + sizes[order]
        reach = np.maximum.accumulate(hi)
        first = np.flatnonzero(np.concatenate([[True], lo[1:] - reach[:-1] >= self.LOCAL_COALESCE]))
        fd, pread, where = self._fd, os.pread, order.tolist()
        assert fd is not None
        bases, ends = lo[first].tolist(), reach[np.append(first[1:], n) - 1].tolist()
        wants = [e - b for b, e in zip(bases, ends, strict=True)]
        with guarded(self.path, "reading"):
            runs = [pread(fd, w, b) for w, b in zip(wants, bases, strict=True)]
            got = list(map(len, runs))
            short = [i for i, (g, w) in enumerate(zip(got, wants, strict=True)) if g != w] \
                if got != wants else []
            for i in short:  # a short read: read on (still short: the file is shorter now)
                runs[i] = self._pread_rest(runs[i], bases[i], wants[i])
        for i in short:
            if len(runs[i]) != wants[i]:
                raise OSError(errno.EIO, f"short read: {len(runs[i])} of {wants[i]} bytes at "
                                         f"offset {bases[i]} (the file is shorter than when it "
                                         "was opened: truncated?)", self.path)
        if len(runs) == n:  # no range shares a read (records far apart): each run is one
            for k, data in zip(where, runs, strict=True):
                out[k] = data
            return out
        for a, b, base, data in zip(first.tolist(), np.append(first[1:], n).tolist(), bases,
                                    runs, strict=True):
            if b - a == 1:
                out[where[a]] = data
            else:
                for k in where[a:b]:
                    start = int(starts[k]) - base
                    out[k] = data[start: start + int(sizes[k])]
        return out

    def _pread_rest(self, data: bytes, start: int, length: int) -> bytes:
        """After a short pread: read on until `length` bytes or the end of the file."""
        assert self._fd is not None
        while 0 < len(data) < length:
            more = os.pread(self._fd, length - len(data), start + len(data))
            if not more:
                break
            data += more
        return data

    def _remote(self, start: int, length: int) -> bytes:
        if self.path.startswith("gs://"):
            return self._store.read_range(self.path, start, length, self._generation)
        with self._lock:
            if self._handle is None:
                self._handle = open_read(self.path)
            self._handle.seek(start)
            return self._handle.read(length)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._store = None
        self._size = None
