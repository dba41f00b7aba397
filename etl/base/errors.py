"""Project errors, their exit codes, and the bad-record value that sources and the encoder
report instead of raising.

Exit codes (documented in the README; `run_pipeline.py` maps every EtlError to its code):
    0 ok · 1 other failure · 2 bad configuration or arguments (also a refused output) ·
    3 bad input over the allowed fraction, input whose rest cannot be read, or an output
      that fails `verify` ·
    4 output locked by another run · 5 storage error (disk full, permission, I/O) ·
    6 blocked by a quality check (`checks:`): the span is quarantined, a person decides
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_CONFIG = 2
EXIT_BAD_INPUT = 3
EXIT_LOCKED = 4
EXIT_STORAGE = 5
EXIT_BLOCKED = 6

QUOTE_LIMIT = 200  # characters of a user's value quoted in a message
REASON_LIMIT = 1000  # characters of a rejected record's reason (a safety net; quote() is the rule)


def quote(value: Any, limit: int = QUOTE_LIMIT, *, plain: bool = False) -> str:
    """`repr(value)` (`str` with `plain`) of a piece of user data, for a message: at most
    `limit` characters, and a longer one cut there and followed by `… (N bytes)`, N the whole
    value's size (UTF-8 bytes of a str, the length of bytes, the size of the text of anything
    else). Every message that quotes a record's value goes through here, so a 10 MB field
    never lands whole in an error line, the run history or a rejected record's reason.

        quote("abc") == "'abc'";  quote("x" * 10**7) == "'xxx...x'… (10000000 bytes)"
    """
    show = str if plain else repr
    if isinstance(value, (str, bytes, bytearray)):
        n = min(len(value), limit)
        text = show(value[:n])
        while len(text) > limit and n:  # escapes (\x00, \u2028) make a repr longer
            n = min(n - 1, n * limit // len(text))
            text = show(value[:n])
        if n == len(value):
            return text
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else len(value)
        return f"{text}… ({size} bytes)"
    text = show(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"


def bounded(text: str, limit: int) -> str:
    """A whole message (not one value) cut by `quote` to at most `limit` characters, its
    `… (N bytes)` included, so that bounding it again changes nothing; unchanged if it fits."""
    return text if len(text) <= limit else quote(text, limit - 30, plain=True)  # N: < 21 digits


class EtlError(Exception):
    """Base of every error this project raises on purpose; `exit_code` is what the CLI returns."""

    exit_code = EXIT_OTHER


class SchemaError(EtlError, ValueError):
    """A schema file or a schema feature is malformed; the message names the file and feature."""

    exit_code = EXIT_CONFIG


class ConfigError(EtlError, ValueError):
    """A job file or argument is malformed, or the output is refused; names file and key."""

    exit_code = EXIT_CONFIG


class BadInputError(EtlError):
    """Input that cannot be converted as asked: too many rejected records, or a structural
    error (corrupt framing, truncated compression) that makes the rest of a file unreadable."""

    exit_code = EXIT_BAD_INPUT


class RecordError(BadInputError, ValueError):
    """A record cannot be read or encoded; the message names file, position and feature."""


class LockedError(EtlError):
    """Another live run holds the output's lock; the message names the holder."""

    exit_code = EXIT_LOCKED


class StorageError(EtlError):
    """A read or write failed in storage (disk full, permission, I/O); names the path."""

    exit_code = EXIT_STORAGE


class BlockedError(EtlError):
    """A `block:` quality check failed (etl.quality): nothing was published, the run's data
    waits in quarantine for a person (`quarantine release|drop OUT`, or `run --accept`).
    `checks`: the failed checks as etl.quality results (dicts), for the history."""

    exit_code = EXIT_BLOCKED

    def __init__(self, message: str, checks: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.checks = list(checks or [])


class VerifyError(EtlError):
    """Published output does not match its manifest, or holds what it does not list; the
    message names the file (and offset). Exit 3: the data cannot be used as it is."""

    exit_code = EXIT_BAD_INPUT


class ForeignEntries(VerifyError):
    """A published output whose data is whole but which holds entries its manifest does not
    list (a user's file, an empty folder): `verify` fails, a rerun still skips it as current
    (nothing of the data is lost) and warns; a rebuild refuses to replace it."""


# Why a record was rejected: a fixed list, so `by_reason` in the manifest counts by code and a
# user can filter the dead-letter file. The message of each BadRecord says the details.
REASONS: dict[str, str] = {
    "wrong_field_count": "a CSV row with more or fewer fields than the header",
    "unterminated_quote": "a quoted CSV field that is never closed (the row runs on)",
    "not_utf8": "bytes that are not valid UTF-8 text",
    "invalid_json": "a JSON Lines line that is not valid JSON, or not an object",
    "unparsable_number": "text that cannot be read as the feature's number type",
    "unparsable_date": "text that cannot be read as the feature's date or timestamp, or a "
                       "value finer than its unit (never truncated), or a local time a clock "
                       "change skips or repeats",
    "out_of_range": "a number outside the feature dtype's range (int64 overflow, uint8 > 255, "
                    "float32 overflow, a fraction for an integer)",
    "nan_not_allowed": "NaN or Inf in a float feature without `allow_nan: true`",
    "not_in_vocabulary": "a label missing from the feature's vocabulary (and no oov_id)",
    "missing_required": "a required feature (no `default:`) has no value",
    "wrong_shape": "a value count, list nesting or image size that does not fit the shape",
    "wrong_type": "a value of another kind than the schema's (text where a list is due...)",
    "bad_image": "an image that cannot be decoded, or not the schema's encoding",
    "unsupported_image": "an image file Pillow reads that cannot be stored as it is: several "
                         "frames (animated GIF, multipage TIFF) without `first_frame: true`, "
                         "or 16-bit/float pixels an 8-bit image would clip",
    "corrupt_record": "a record whose framing or checksum is broken",
    "oversized_record": "a record larger than `max_record_bytes` (default 64 MiB)",
    "schema_mismatch": "an already-serialized record that does not fit the schema "
                       "(another proto kind, a feature of another type)",
    "unreadable_rest": "records after a structural error that could not be read at all",
}


@dataclass(frozen=True)
class BadRecord:
    """One rejected record: where it came from, a reason code and a readable reason.

    Sources and the encoder return these as values (never raise for one bad record), so a
    dead-letter output can collect them while the good records go through.

    Where: `line` is the 1-based physical line a text record starts on (CSV, JSONL, text);
    binary formats give the 0-based `record` index in their file and, where it has one, the
    `byte` offset. `count` > 1 only for an `unreadable_rest` entry standing for that many
    records that could not be read after a structural error.
    """

    source: str
    code: str
    reason: str
    line: int | None = None
    record: int | None = None
    byte: int | None = None
    feature: str = ""
    raw: str = ""
    count: int = 1

    def __post_init__(self) -> None:
        if self.code not in REASONS:
            raise ValueError(f"unknown reason code {self.code!r}; known: {sorted(REASONS)}")
        if len(self.reason) > REASON_LIMIT:  # a message built without quote(): still bounded
            object.__setattr__(self, "reason", bounded(self.reason, REASON_LIMIT))

    def where(self) -> str:
        """`file:line 12`, `file: record 3 (byte 4096)`, or `file`."""
        if self.line is not None:
            return f"{self.source}:{self.line}"
        parts = []
        if self.record is not None:
            parts.append(f"record {self.record}")
        if self.byte is not None:
            parts.append(f"byte {self.byte}")
        return f"{self.source}: {', '.join(parts)}" if parts else self.source

    def message(self) -> str:
        what = f" feature {self.feature!r}:" if self.feature else ""
        return f"{self.where()}:{what} {self.reason} [{self.code}]"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "") or k == "source"}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BadRecord:
        return cls(**doc)
