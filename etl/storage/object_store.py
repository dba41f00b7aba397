"""Google Cloud Storage operations with generation preconditions, and a bounded retry.

Object stores have no atomic rename and no O_EXCL, but every single-object write on GCS is
atomic and may carry a precondition: `if_generation_match=0` creates only if absent,
`if_generation_match=G` replaces (or deletes) only the very version G a run saw. The lock,
the versioned publish and the clean-up of gs:// outputs (etl.output.remote, etl.output.publish,
etl.output.lock) are built from these; Beam's gcsio keeps the data path (shards, spills).

Every call retries transient failures (408, 429, 5xx, dropped connections) with the
library's exponential backoff, up to a deadline: `ETL_STORAGE_RETRY_SECONDS` (default 60 s).
When it runs out, or on a permanent error, a StorageError (exit 5) names the object. A
precondition that does not hold is not an error of the store: it raises Conflict, which the
caller turns into what it means (someone else holds the lock, published first, ...).

google-cloud-storage is imported on first use (it comes with apache-beam[gcp]).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any

from etl.base.errors import ConfigError, StorageError

RETRY_ENV = "ETL_STORAGE_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 60.0
SCHEME = "gs://"


class Conflict(Exception):
    """A generation precondition did not hold (HTTP 412), or the object is gone (404)."""


class MissingBucket(ConfigError):
    """A gs:// path whose bucket does not exist (a typo, or not created yet): a setting to fix
    (exit 2), not a store failure to retry; the store itself answers only "404"."""


def missing_bucket(bucket: str, role: str = "", path: str = "") -> MissingBucket:
    """`bucket gs://B does not exist (ROLE PATH); create it or fix the path`."""
    where = f" ({role} {path})" if role else ""
    return MissingBucket(f"bucket {SCHEME}{bucket} does not exist{where}; create it or fix "
                         "the path")


@dataclass(frozen=True)
class ObjectInfo:
    url: str  # gs://bucket/name
    size: int
    generation: int
    crc32c: str | None


def is_gcs(path: str) -> bool:
    return path.startswith(SCHEME)


def split(url: str) -> tuple[str, str]:
    """gs://bucket/name -> (bucket, name)."""
    if not is_gcs(url):
        raise ConfigError(f"{url}: only gs:// object-store outputs are supported (a safe publish "
                          "needs GCS generation preconditions); write locally or to gs://")
    bucket, _, name = url[len(SCHEME):].partition("/")
    if not bucket:
        raise ConfigError(f"{url}: no bucket name")
    return bucket, name


def retry_seconds() -> float:
    """How long one storage call keeps retrying transient failures (ETL_STORAGE_RETRY_SECONDS)."""
    raw = os.environ.get(RETRY_ENV, "")
    if not raw:
        return DEFAULT_RETRY_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{RETRY_ENV}={raw!r}: give a number of seconds") from None
    if value <= 0:
        raise ConfigError(f"{RETRY_ENV}={raw!r}: give a positive number of seconds")
    return value


class Store:
    """One google-cloud-storage client with our retry and precondition handling. Built per
    run (no process-global client); cheap to keep, not meant to cross process boundaries."""

    def __init__(self, deadline: float | None = None):
        from google.api_core import exceptions  # noqa: PLC0415
        from google.cloud.storage.retry import DEFAULT_RETRY  # noqa: PLC0415

        self.deadline = retry_seconds() if deadline is None else deadline
        self._exceptions = exceptions
        self._retry = DEFAULT_RETRY.with_timeout(self.deadline).with_delay(
            initial=min(1.0, self.deadline / 10), maximum=min(16.0, self.deadline / 2))
        # per HTTP request: connect, read; a store that never answers fails like one that 503s
        self._timeout = (min(10.0, self.deadline), min(60.0, self.deadline))
        self._made: Any = None

    @property
    def _client(self) -> Any:
        """Made on first use: a bad path is refused before any credential lookup."""
        if self._made is None:
            self._made = _client()
        return self._made

    # ------------------------------------------------------------------------------ calls

    def _call(self, url: str, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        ex = self._exceptions
        try:
            return fn(*args, retry=self._retry, timeout=self._timeout, **kwargs)
        except (ex.PreconditionFailed, ex.NotFound) as e:
            raise Conflict(f"{url}: {getattr(e, 'message', e)}") from e
        except ex.RetryError as e:
            cause = e.cause if e.cause is not None else e
            raise StorageError(
                f"cannot {action} {url}: the store kept failing for {self.deadline:g} s "
                f"({_short(cause)}); nothing was published (retry time: {RETRY_ENV})") from e
        except ex.GoogleAPICallError as e:
            raise StorageError(f"cannot {action} {url}: {_short(e)}") from e
        except (OSError, ValueError) as e:  # connection errors outside the retry's predicate
            raise StorageError(f"cannot {action} {url}: {_short(e)}") from e

    def _blob(self, url: str) -> Any:
        bucket, name = split(url)
        return self._client.bucket(bucket).blob(name)

    def read(self, url: str) -> tuple[bytes, int] | None:
        """(data, generation) of an object, None when absent: the bytes of exactly that
        generation (read with if_generation_match; replaced meanwhile: read again)."""
        for _ in range(5):
            info = self.stat(url)
            if info is None:
                return None
            try:
                data = self._call(url, "read", self._blob(url).download_as_bytes,
                                  if_generation_match=info.generation)
            except Conflict:
                continue
            return bytes(data), info.generation
        raise StorageError(f"cannot read {url}: it keeps being replaced while read")

    def read_range(self, url: str, start: int, length: int,
                   generation: int | None = None) -> bytes:
        """Bytes start..start+length of an object, one ranged GET (random access to records
        through an index), of exactly `generation` when given; a missing object (or
        generation) raises FileNotFoundError naming it."""
        bucket, name = split(url)
        blob = self._client.bucket(bucket).blob(name, generation=generation)
        try:
            data = self._call(url, "read", blob.download_as_bytes, start=start,
                              end=start + length - 1)
        except Conflict as e:
            raise FileNotFoundError(errno.ENOENT, "no such object", url) from e
        return bytes(data)

    def stat(self, url: str) -> ObjectInfo | None:
        bucket, name = split(url)
        blob = self._call(url, "read the metadata of", self._client.bucket(bucket).get_blob,
                          name)
        return None if blob is None else _info(bucket, blob)

    def write(self, url: str, data: bytes, if_generation_match: int) -> int:
        """Create (`if_generation_match=0`) or replace generation G; returns the new
        generation. Conflict when the object is not (or no longer) what the caller saw."""
        blob = self._blob(url)
        self._call(url, "write", blob.upload_from_string, data,
                   content_type="application/json", if_generation_match=if_generation_match)
        return int(blob.generation)

    def upload_new(self, local: str, dst: str) -> int:
        """Upload a local file to `dst`, created only if absent; returns its generation."""
        blob = self._blob(dst)
        self._call(dst, "upload to", blob.upload_from_filename, local,
                   content_type="application/octet-stream", if_generation_match=0)
        return int(blob.generation)

    def copy_new(self, src: str, dst: str) -> ObjectInfo:
        """Server-side copy of `src` to `dst`, which must not exist (if_generation_match=0).
        A retried request whose first attempt landed finds `dst` already there: accepted when
        it holds the same bytes (size and crc32c), else Conflict."""
        source = self.stat(src)
        if source is None:
            raise StorageError(f"cannot copy {src}: it does not exist")
        sbucket, sname = split(src)
        src_blob = self._client.bucket(sbucket).blob(sname)
        dst_blob = self._blob(dst)
        token = None
        try:
            while True:
                token, _, _ = self._call(dst, "copy to", dst_blob.rewrite, src_blob, token=token,
                                         if_generation_match=0)
                if token is None:
                    break
        except Conflict:
            there = self.stat(dst)
            if there is None or (there.size, there.crc32c) != (source.size, source.crc32c):
                raise
            return there
        there = self.stat(dst)
        if there is None or there.size != source.size or (
                source.crc32c and there.crc32c and there.crc32c != source.crc32c):
            raise StorageError(f"copy of {src} to {dst} did not arrive whole "
                               f"({None if there is None else there.size} of {source.size} bytes)")
        return there

    def delete(self, url: str, if_generation_match: int | None = None) -> bool:
        """Delete one object (only generation G when given); False if it was not there (or no
        longer generation G)."""
        blob = self._blob(url)
        kwargs = {} if if_generation_match is None else {"if_generation_match": if_generation_match}
        try:
            self._call(url, "delete", blob.delete, **kwargs)
        except Conflict:
            return False
        return True

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose name starts with `prefix` (a gs:// URL; end it with "/" for a
        folder), sorted by name. MissingBucket when its bucket does not exist (a listing is
        answered 404 for nothing else)."""
        bucket, name = split(prefix)

        def listing(**kwargs: Any) -> list[Any]:
            return list(self._client.list_blobs(bucket, prefix=name, **kwargs))

        try:
            blobs = self._call(prefix, "list", listing)
        except Conflict:
            raise missing_bucket(bucket) from None
        return sorted((_info(bucket, b) for b in blobs), key=lambda o: o.url)

    def bucket_exists(self, bucket: str) -> bool:
        """Whether `bucket` exists, asked by listing at most one object: the permission a run
        needs anyway (objects.list); looking the bucket up (buckets.get) is refused to the
        object-level roles many service accounts have. A 403 says it exists (a missing
        bucket is 404 to everyone): whether the run may read it is for the run to find."""

        def first(**kwargs: Any) -> list[Any]:
            return list(self._client.list_blobs(bucket, max_results=1, **kwargs))

        try:
            self._call(f"{SCHEME}{bucket}", "list", first)
        except Conflict:
            return False
        except StorageError as e:
            if isinstance(e.__cause__, self._exceptions.Forbidden):
                return True
            raise
        return True


def _info(bucket: str, blob: Any) -> ObjectInfo:
    return ObjectInfo(f"{SCHEME}{bucket}/{blob.name}", int(blob.size or 0),
                      int(blob.generation or 0), blob.crc32c)


def _client() -> Any:
    """An anonymous client against STORAGE_EMULATOR_HOST when set (an emulator has no
    credentials, and looking them up costs ~25 s), else application default credentials."""
    from google.cloud import storage  # noqa: PLC0415

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client.create_anonymous_client()
    try:
        return storage.Client()
    except Exception as e:  # noqa: BLE001 - google.auth raises several kinds
        raise StorageError(f"cannot reach Google Cloud Storage: {_short(e)}; run "
                           "`gcloud auth application-default login` or set "
                           "GOOGLE_APPLICATION_CREDENTIALS") from e


def _short(e: BaseException) -> str:
    """The first line of an API error (their messages carry the whole response body)."""
    text = str(getattr(e, "message", "") or e).strip().splitlines()
    code = getattr(e, "code", None)
    head = text[0] if text else type(e).__name__
    if len(head) > 200:
        head = head[:200] + "..."
    return f"HTTP {code}: {head}" if isinstance(code, int) and str(code) not in head else head
