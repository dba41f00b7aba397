"""Project errors and the bad-record value that sources and the encoder report instead of raising."""

from __future__ import annotations

from dataclasses import asdict, dataclass


class EtlError(Exception):
    """Base of every error this project raises on purpose."""


class SchemaError(EtlError, ValueError):
    """A schema file or a schema feature is malformed; the message names the file and feature."""


class ConfigError(EtlError, ValueError):
    """A job file is malformed; the message names the file and key."""


class RecordError(EtlError, ValueError):
    """A record cannot be read or encoded; the message names file, position and feature."""


class VerifyError(EtlError):
    """Published output does not match its manifest; the message names the file and offset."""


@dataclass(frozen=True)
class BadRecord:
    """One rejected record: where it came from and why.

    Sources and the encoder return these as values (never raise for one bad record), so a
    dead-letter output can collect them while the good records go through.
    """

    source: str
    position: int
    reason: str
    feature: str = ""
    raw: str = ""

    def message(self) -> str:
        where = f"{self.source}:{self.position}" if self.source else f"record {self.position}"
        what = f" feature {self.feature!r}:" if self.feature else ""
        return f"{where}:{what} {self.reason}"

    def to_json(self) -> dict[str, object]:
        return asdict(self)
