"""Image folders, one sub-folder per class: root/<class>/<file>.{png,jpg,jpeg,gif,bmp,tif,tiff,webp}.

A root directory is the unit: `files()` lists the roots (what `read` takes and `Block.source`
says), `inputs()` every image file under them. Inside a root the image files are sorted and a
record's position is its index in that list, so identity stays stable whatever the block size,
and a block spans many image files. Columns: `image` (the encoded file bytes as Arrow
large_binary, or with `decode: true` a uint8 NumPy block (n, H, W, channels)), `label` (the
class folder name) and `filename` (path relative to the root).

Every file under a root is stored, rejected or skipped, never left out without a word:
- files that are not images (another extension: README.txt, .DS_Store) or not at
  <root>/<class>/<file> are skipped, not records: one warning per root names them and their
  count (on the terminal and in the run's log), when the root is read;
- image files become records. PNG and JPEG files already in the schema feature's encoding
  are passed on byte for byte; GIF, BMP, TIFF, WebP (and PNG into a jpeg feature, JPEG into a
  png one) are decoded with Pillow into the feature's channels and encoded once (PNG:
  lossless, so the pixels read back are Pillow's decode of the file; JPEG: quality 95).
  A feature with `resize`/`pad` gets the file's bytes as they are (the encoder fits them,
  etl.contract.images.fit_image).

Every image is decoded once with Pillow to prove it is readable (`verify: false` skips the
full decode when not decoding and not converting, the header is still read). Rejected images
are BadRecords whose `source` is the image file itself and `record` its index in the root:
- `bad_image`: Pillow cannot open or decode it (truncated, not an image);
- `unsupported_image`: several frames (animated GIF, multipage TIFF/WebP) unless the
  `first_frame: true` option says to store the first frame; 16-bit or float pixels a
  conversion would clip;
- `wrong_shape`: with `prepare(schema, ...)` (the pipeline always calls it) the schema's image
  feature (the one whose source column is `image`) declares [height, width, channels]; an image
  of another height or width is rejected (PNG/JPEG blobs are re-decoded to the schema's channel
  count by `tf.io.decode_png/jpeg`, so only decoded pixels must match the channels). Not for
  features of any size ([null, null, C]) or with `resize`/`pad`. Without a schema, decoded
  images must match the root's first good image;
- `oversized_record`: a file over `max_record_bytes`, rejected without being read.

Progress: one listing (fs.match) gives the image files with their sizes; a root's size is the
sum of its image files' (`sizes`, what read_plan counts for the unit) and each block's
`end_offset` the bytes of the files up to its last one, so the bar moves block by block.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from etl.base.errors import BadRecord, ConfigError
from etl.contract.images import (
    AS_ENCODING,
    PILLOW_FORMATS,
    ImageProblem,
    encoded,
    feature_pixels,
    pad_problem,
    why_unreadable,
)
from etl.sources.base import Block
from etl.sources.file_source import FileSource, bool_option, join
from etl.storage import fs

if TYPE_CHECKING:
    from etl.contract.schema import Feature, Schema

EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp")
_MODES = {1: "L", 3: "RGB"}
SKIPPED_NAMED = 20  # skipped files named in the warning (then "... and N more")
log = logging.getLogger(__name__)


class ImageFolderReader(FileSource):
    """`format: images`; options: decode, channels (1 | 3), verify, first_frame, block_rows."""

    OPTIONS = {"decode", "channels", "verify", "first_frame", "block_rows"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        super().__init__(config, base_dir, where)
        opts = self.opts
        self.decode = bool_option(opts, "decode", False, where)
        self.verify = bool_option(opts, "verify", True, where)
        self.first_frame = bool_option(opts, "first_frame", False, where)
        self.channels = opts.get("channels", 3)
        if self.channels not in _MODES:
            raise ConfigError(f"{where}: 'channels' must be 1 or 3, got {self.channels!r}")
        if "channels" in opts and not self.decode:
            raise ConfigError(f"{where}: 'channels' needs 'decode: true' (undecoded images "
                              f"are passed on as they are)")
        self.feature = ""  # the schema feature the `image` column feeds, once prepared
        self.shape: tuple[int, int, int] | None = None  # its declared [height, width, channels]
        self.target: Feature | None = None  # that feature when it stores png/jpeg files
        self._listed: dict[str, dict[str, int]] | None = None  # _images(), once listed

    def prepare(self, schema: Schema, max_record_bytes: int) -> None:
        """Learn the image feature's declared shape, so every image is checked against it."""
        super().prepare(schema, max_record_bytes)
        for f in schema.features:
            if "image" not in f.sources or len(f.shape) != 3 or not (f.fixed
                                                                      or f.variable_image):
                continue
            if f.encoding in ("png", "jpeg") or (self.decode and f.dtype == "uint8"):
                self.feature = f.name
                if f.encoding in ("png", "jpeg"):
                    self.target = f
                if f.fixed and not (f.resize or f.pad):
                    self.shape = (int(f.shape[0]), int(f.shape[1]), int(f.shape[2]))
                break
        if self.target and self.decode and (self.target.variable_image or self.target.resize
                                            or self.target.pad):
            size = (f"shape {list(self.target.shape)}" if self.target.variable_image
                    else "resize" if self.target.resize else "pad")
            raise ConfigError(f"{self.where}: 'decode: true' gives pixel arrays of one size, "
                              f"but schema feature {self.feature!r} takes images of any size "
                              f"({size}); drop 'decode: true' to store the files encoded")
        if self.shape and self.decode and self.shape[2] != self.channels:
            raise ConfigError(f"{self.where}: images are decoded to {self.channels} channel(s) "
                              f"('channels' option), but schema feature {self.feature!r} has "
                              f"shape {list(self.shape)}; set 'channels: {self.shape[2]}'")

    def _images(self) -> dict[str, dict[str, int]]:
        """root -> its image files (sorted) with their sizes, for every root the patterns
        match; listed once per reader (files, inputs and sizes all ask)."""
        if self._listed is not None:
            return self._listed
        roots: dict[str, dict[str, int]] = {}
        for pattern in self.patterns:  # patterns may overlap
            for root, files in _image_files(join(self.base_dir, pattern)).items():
                roots.setdefault(root, {}).update(files)
        if not roots:
            raise ConfigError(f"{self.where}: no {'/'.join(EXTENSIONS)} images found as "
                              f"<root>/<class>/<file> under {self.patterns}")
        self._listed = {root: dict(sorted(files.items())) for root, files in sorted(roots.items())}
        return self._listed

    def files(self) -> list[str]:
        return list(self._images())

    def inputs(self) -> list[str]:
        return sorted(f for files in self._images().values() for f in files)

    def sizes(self) -> dict[str, int]:
        """Every image file's size, from the listing, and each root's: the sum of its image
        files (what a read of the root reads; progress counts it, not a directory entry)."""
        out: dict[str, int] = {}
        for root, files in self._images().items():
            out.update(files)
            out[root] = sum(files.values())
        return out

    def read(self, path: str) -> Iterator[Block]:
        root = path.rstrip("/")
        listed = _image_files(root).get(root, {})
        images = list(listed)
        _warn_skipped(root, set(listed))
        # progress: bytes of the image files up to the end of each block (Block.end_offset;
        # the root's num_bytes is their sum, see `sizes`)
        ends = np.cumsum([listed[f] for f in images], dtype=np.int64)
        size: tuple[int, int] | None = None  # (width, height) of the root's first good image
        if self.shape:
            size = (self.shape[1], self.shape[0])
        for start in range(0, len(images), self.block_rows):
            chunk = images[start : start + self.block_rows]
            good: list[int] = []
            blobs: list[bytes] = []
            pixels: list[np.ndarray] = []
            bad: list[BadRecord] = []
            for i, f in enumerate(chunk, start):
                def reject(code: str, reason: str, f: str = f, i: int = i,
                           bad: list[BadRecord] = bad) -> None:
                    bad.append(BadRecord(f, code, reason, record=i, feature=self.feature,
                                         raw=_relative(root, f)))

                try:
                    data = self._load(f)
                except _TooBig as e:
                    reject("oversized_record", str(e))
                    continue
                try:
                    found, array, data = self._check(data)
                except ImageProblem as e:
                    reject(e.code, e.reason)
                    continue
                except Exception as e:  # Pillow raises many types for broken files
                    reject("bad_image", f"cannot read image: {_why(e)}")
                    continue
                if self.target and not self.shape:  # any size, or resize/pad: no size check
                    found = size = (0, 0)
                size = size or found
                if found != size:
                    what = (f"schema feature {self.feature!r} has shape {list(self.shape)}"
                            if self.shape else f"the first image of {root} is "
                                               f"{size[0]}x{size[1]}")
                    reject("wrong_shape", f"image is {found[0]}x{found[1]} (width x height), "
                                          f"expected {size[0]}x{size[1]}: {what}")
                    continue
                if self.decode:
                    pixels.append(array)
                else:
                    blobs.append(data)
                good.append(i)
            names = [_relative(root, images[i]) for i in good]
            columns: dict[str, Any] = {
                "image": self._image_column(pixels, blobs, size),
                "label": pa.array([n.split("/")[0] for n in names], pa.string()),
                "filename": pa.array(names, pa.string()),
            }
            yield Block(columns, np.array(good, np.int64), source=path, bad=bad,
                        end_offset=int(ends[start + len(chunk) - 1]))

    def _load(self, f: str) -> bytes:
        with fs.open_read(f) as fh:
            try:
                size = fh.seek(0, 2)
                fh.seek(0)
            except (OSError, AttributeError, ValueError):
                size = 0
            if size > self.max_record_bytes:
                raise _TooBig(f"image file of {size} bytes is over max_record_bytes "
                              f"({self.max_record_bytes}); skipped unread")
            return fh.read()

    def _check(self, data: bytes) -> tuple[tuple[int, int], np.ndarray | None, bytes]:
        """(width, height), the pixels when `decode` is on, and the bytes to store: the file's
        own when it already is the feature's encoding (or the feature fits it: resize/pad),
        else its pixels encoded once to that encoding. Decodes fully unless `verify: false`
        and nothing is converted (a truncated file then fails in `load`); the header is
        always read. Raises ImageProblem for what cannot be stored as it is."""
        from PIL import Image  # noqa: PLC0415

        with Image.open(io.BytesIO(data)) as img:
            kind = img.format or "unknown"
            if kind not in PILLOW_FORMATS:
                raise _NotSupported(f"a {kind} image; {', '.join(PILLOW_FORMATS[:-1])} or "
                                    f"WEBP expected")
            frames = int(getattr(img, "n_frames", 1) or 1)
            if frames > 1 and kind != "MPO" and not self.first_frame:
                raise ImageProblem("unsupported_image", f"a {kind} of {frames} frames "
                                                        f"(animated or multipage); set the "
                                                        f"source option 'first_frame: true' "
                                                        f"to store its first frame")
            found = (int(img.size[0]), int(img.size[1]))
            target = self.target
            too_big = target and pad_problem(target, found[1], found[0], kind)
            if too_big:
                raise ImageProblem("wrong_shape", too_big)
            convert = (target is not None and not (target.resize or target.pad)
                       and AS_ENCODING.get(kind) != target.encoding)
            if self.decode or self.verify or convert:
                img.load()
            if convert and target is not None:
                data = encoded(feature_pixels(img, target, f"{kind} image"), target.encoding)
            if not self.decode:
                return found, None, data
            array = np.asarray(img.convert(_MODES[self.channels]), np.uint8)
        return found, array.reshape(*array.shape[:2], self.channels), data

    def _image_column(
        self, pixels: list[np.ndarray], blobs: list[bytes], size: tuple[int, int] | None
    ) -> Any:
        if not self.decode:
            return pa.array(blobs, pa.large_binary())
        if pixels:
            return np.stack(pixels)
        width, height = size or (0, 0)
        return np.zeros((0, height, width, self.channels), np.uint8)


def _warn_skipped(root: str, images: set[str]) -> None:
    """Name the files under `root` that are not stored nor rejected (not images, or not at
    <root>/<class>/<file>): one warning per root, so none is left out silently."""
    try:
        every = [f for f, _ in fs.list_dir(root)]
    except OSError:
        return
    skipped: list[str] = []
    for f in every:
        if f in images:
            continue
        name = _relative(root, f)
        image_like = name.lower().endswith(EXTENSIONS)
        skipped.append(f"{name} (not at <root>/<class>/<file>)" if image_like else name)
    if not skipped:
        return
    more = len(skipped) - SKIPPED_NAMED
    names = ", ".join(skipped[:SKIPPED_NAMED]) + (f" ... and {more} more" if more > 0 else "")
    log.warning("%s: skipped %d file(s) that are not images (not records, not rejected; "
                "stored are %s files at <root>/<class>/<file>): %s", root, len(skipped),
                "/".join(e[1:] for e in EXTENSIONS), names)


def _image_files(pattern: str) -> dict[str, dict[str, int]]:
    """root -> {image file: size in bytes}, sorted, for roots matching `pattern` (a directory
    or a glob of them): one listing (fs.match gives the sizes with the names)."""
    base = pattern.rstrip("/")
    depth = base.count("/") + 1
    roots: dict[str, dict[str, int]] = {}
    for f, size in fs.match(f"{base}/*/*"):
        parts = f.split("/")
        # gs:// globs let * cross '/': keep exactly root/<class>/<file>
        if len(parts) == depth + 2 and parts[-1].lower().endswith(EXTENSIONS):
            roots.setdefault("/".join(parts[:depth]), {})[f] = int(size)
    return {root: dict(sorted(files.items())) for root, files in roots.items()}


class _TooBig(Exception):
    """An image file over max_record_bytes."""


class _NotSupported(Exception):
    """Pillow opened it, but it is a format this source does not store (ICO, PSD...)."""


def _why(error: Exception) -> str:
    if isinstance(error, _NotSupported):
        return str(error)
    return why_unreadable(error)


def _relative(root: str, path: str) -> str:
    return path[len(root) + 1 :]
