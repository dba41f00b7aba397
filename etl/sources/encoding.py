"""A text source's `encoding:` (CSV): which codec, and its bytes transcoded to UTF-8.

The readers find lines, quotes and delimiters in the raw bytes (splits, the quote scan, the
line numbers of bad rows), so only codecs that write those ASCII characters as the same single
bytes are accepted (UTF-8, latin-1, cp1252, the other 8-bit code pages, Shift JIS, GBK, ...);
UTF-16/32 are refused with a one-line ConfigError. Transcoding then never adds or removes a
line break, so 1-based line numbers stay exact. Bytes the codec cannot decode are carried over
as they are (surrogateescape), so they stay invalid UTF-8 and the row is rejected as `not_utf8`
("not valid cp1252 text") instead of failing the file.

UTF-8 (the default) and `utf-8-sig` need no transcoding: pyarrow drops a UTF-8 byte order mark
at the start of the data, so it never becomes part of the first column name or value.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import Any

from etl.base.errors import ConfigError

_PLAIN = "\n\r\t ,;|\"'#0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def text_encoding(opts: Mapping[str, Any], where: str, *specials: str) -> tuple[str, str | None]:
    """(the name to show, the codec to transcode with or None for UTF-8) of `encoding:`."""
    name = opts.get("encoding", "utf-8")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: 'encoding' must be a codec name such as utf-8, latin-1 or "
                          f"cp1252, got {name!r}")
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        raise ConfigError(f"{where}: unknown 'encoding' {name!r}; use a Python codec name such "
                          f"as utf-8, utf-8-sig, latin-1, cp1252") from None
    if codec in ("utf-8", "utf-8-sig"):
        return name, None
    plain = _PLAIN + "".join(specials)
    try:
        same = plain.encode(codec) == plain.encode("ascii", "replace")
    except (UnicodeError, LookupError):
        same = False
    if not same:
        raise ConfigError(f"{where}: 'encoding' {name!r} does not write line breaks, quotes "
                          f"and delimiters as single ASCII bytes, which the CSV reader needs; "
                          f"convert the file to UTF-8 first (e.g. iconv -f {name} -t utf-8)")
    return name, codec


def transcode(data: bytes, codec: str) -> bytes:
    """Whole lines in `codec` as UTF-8 (undecodable bytes kept as they are: invalid UTF-8)."""
    return data.decode(codec, "surrogateescape").encode("utf-8", "surrogateescape")


class Transcoded:
    """A read handle giving another handle's bytes transcoded to UTF-8, at most `n` bytes per
    read (the rest waits), decoded incrementally so a character is never cut in two."""

    def __init__(self, fh: Any, codec: str):
        self.fh = fh
        self.decoder = codecs.getincrementaldecoder(codec)("surrogateescape")
        self.pending = b""
        self.done = False
        self.closed = False

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while not self.done and (n < 0 or len(self.pending) < n):
            raw = self.fh.read(n if n > 0 else -1)
            text = self.decoder.decode(raw, final=not raw)
            self.pending += text.encode("utf-8", "surrogateescape")
            self.done = not raw
        if n < 0:
            out, self.pending = self.pending, b""
        else:
            out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def close(self) -> None:
        self.closed = True
