"""Image folders, one sub-folder per class: root/<class>/<file>.{png,jpg,jpeg}.

A root directory is the unit: `files()` lists the roots (what `read` takes and `Block.source`
says), `inputs()` every image file under them. Inside a root the image files are sorted and a
record's position is its index in that list, so identity stays stable whatever the block size,
and a block spans many image files. Columns: `image` (the encoded file bytes as Arrow
large_binary, or with `decode: true` a uint8 NumPy block (n, H, W, channels)), `label` (the
class folder name) and `filename` (path relative to the root).

Every image is decoded once with Pillow to prove it is readable (`verify: false` skips that
when not decoding); a file that fails (e.g. truncated) or, when decoding, whose size differs
from the root's first good image is a BadRecord with the file path and the reason.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from etl.errors import BadRecord, ConfigError
from etl.sources.base import Block, expand, open_file
from etl.sources.csv_source import FileSource, bool_option, join

EXTENSIONS = (".png", ".jpg", ".jpeg")
_MODES = {1: "L", 3: "RGB"}


class ImageFolderReader(FileSource):
    """`format: images`; options: decode, channels (1 | 3), verify, block_rows."""

    OPTIONS = {"decode", "channels", "verify", "block_rows"}

    def __init__(self, config: dict[str, Any], base_dir: str, where: str):
        super().__init__(config, base_dir, where)
        opts = self.opts
        self.decode = bool_option(opts, "decode", False, where)
        self.verify = bool_option(opts, "verify", True, where)
        self.channels = opts.get("channels", 3)
        if self.channels not in _MODES:
            raise ConfigError(f"{where}: 'channels' must be 1 or 3, got {self.channels!r}")
        if "channels" in opts and not self.decode:
            raise ConfigError(f"{where}: 'channels' needs 'decode: true' (undecoded images "
                              f"are passed on as they are)")

    def _images(self) -> dict[str, list[str]]:
        """root -> its image files (sorted), for every root the patterns match."""
        roots: dict[str, set[str]] = {}
        for pattern in self.patterns:  # patterns may overlap
            for root, files in _image_files(join(self.base_dir, pattern)).items():
                roots.setdefault(root, set()).update(files)
        if not roots:
            raise ConfigError(f"{self.where}: no {'/'.join(EXTENSIONS)} images found as "
                              f"<root>/<class>/<file> under {self.patterns}")
        return {root: sorted(files) for root, files in sorted(roots.items())}

    def files(self) -> list[str]:
        return list(self._images())

    def inputs(self) -> list[str]:
        return sorted(f for files in self._images().values() for f in files)

    def read(self, path: str) -> Iterator[Block]:
        root = path.rstrip("/")
        images = _image_files(root).get(root, [])
        size: tuple[int, int] | None = None  # (width, height) of the root's first good image
        for start in range(0, len(images), self.block_rows):
            chunk = images[start : start + self.block_rows]
            good: list[int] = []
            blobs: list[bytes] = []
            pixels: list[np.ndarray] = []
            bad: list[BadRecord] = []
            for i, f in enumerate(chunk, start):
                try:
                    with open_file(f) as fh:
                        data = fh.read()
                    array = self._check(data) if (self.decode or self.verify) else None
                except Exception as e:  # Pillow raises many types for broken files
                    bad.append(BadRecord(f, i, f"cannot read image: {_why(e)}",
                                         raw=_relative(root, f)))
                    continue
                if self.decode:
                    found = (array.shape[1], array.shape[0])
                    size = size or found
                    if found != size:
                        bad.append(BadRecord(f, i, f"image is {found[0]}x{found[1]}, expected "
                                                   f"{size[0]}x{size[1]} (the first image of "
                                                   f"{root})", raw=_relative(root, f)))
                        continue
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
            yield Block(columns, np.array(good, np.int64), source=path, bad=bad)

    def _check(self, data: bytes) -> np.ndarray | None:
        """Decode fully (a truncated file fails here); pixels when `decode` is on."""
        from PIL import Image  # noqa: PLC0415

        with Image.open(io.BytesIO(data)) as img:
            img.load()
            if not self.decode:
                return None
            array = np.asarray(img.convert(_MODES[self.channels]), np.uint8)
        return array.reshape(*array.shape[:2], self.channels)

    def _image_column(
        self, pixels: list[np.ndarray], blobs: list[bytes], size: tuple[int, int] | None
    ) -> Any:
        if not self.decode:
            return pa.array(blobs, pa.large_binary())
        if pixels:
            return np.stack(pixels)
        width, height = size or (0, 0)
        return np.zeros((0, height, width, self.channels), np.uint8)


def _image_files(pattern: str) -> dict[str, list[str]]:
    """root -> sorted image files for roots matching `pattern` (a directory or a glob of them)."""
    base = pattern.rstrip("/")
    depth = base.count("/") + 1
    roots: dict[str, list[str]] = {}
    for f in expand(f"{base}/*/*"):
        parts = f.split("/")
        # gs:// globs let * cross '/': keep exactly root/<class>/<file>
        if len(parts) == depth + 2 and parts[-1].lower().endswith(EXTENSIONS):
            roots.setdefault("/".join(parts[:depth]), []).append(f)
    return {root: sorted(files) for root, files in roots.items()}


def _why(error: Exception) -> str:
    from PIL import UnidentifiedImageError  # noqa: PLC0415

    if isinstance(error, UnidentifiedImageError):  # its message only names a BytesIO
        return "not a PNG/JPEG image, or its header is cut off"
    return f"{type(error).__name__}: {error}"


def _relative(root: str, path: str) -> str:
    return path[len(root) + 1 :]
