"""Which features are pictures, and pictures as PNG: one rule for `inspect --images` and the
dataset report, so a feature one shows as an image the other shows too.

A picture is a per-record (not sequence) fixed-shape feature that decodes to pixels a PNG
holds: uint8 [H, W] or [H, W, 1|3|4], uint16 [H, W] or [H, W, 1], whatever the encoding (raw
bytes, int64 values, png, jpeg). Pillow is imported only inside the functions.

Also how image files become stored images (the image folder source and the encoder share
it): GIF/BMP/TIFF/WebP decoded and encoded once to the feature's png/jpeg, and the
`resize`/`pad` rules (`fit_image`).

And, for etl.contract.columns, how a record's pixel values are stored (`encode_pixels`) and
the header check every stored PNG/JPEG blob passes (`image_header_problems`: PNG IHDR and
JPEG frame header read, nothing decoded).
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from etl.contract.schema import Feature

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8"
_Why = tuple[str, str]  # etl.contract.columns.Why: (reason code, readable detail)

DISPLAY_MIN_SIDE = 64  # pixels: smaller pictures are upscaled (nearest neighbour) for display


def png_mode(dtype: str, shape: Sequence[int]) -> str | None:
    """Pillow's mode for pixels of this dtype and per-record shape, None if not a picture."""
    if any(d < 1 for d in shape) or len(shape) not in (2, 3):
        return None
    if len(shape) == 2 and min(shape) < 2:  # [1, n] / [n, 1]: a vector, not a picture
        return None
    channels = shape[2] if len(shape) == 3 else 1
    if dtype == "uint8":
        return {1: "L", 3: "RGB", 4: "RGBA"}.get(channels)
    if dtype == "uint16" and channels == 1:
        return "I;16"
    return None


def is_image(f: Feature) -> bool:
    return not f.is_sequence and png_mode(f.dtype, f.shape) is not None


def png_bytes(pixels: np.ndarray) -> bytes:
    """One picture ([H, W] or [H, W, 1|3|4], uint8 or one-channel uint16) as PNG, the pixels
    as they are (no scaling: the PNG holds the data)."""
    from PIL import Image  # noqa: PLC0415

    arr = np.ascontiguousarray(pixels[..., 0] if pixels.ndim == 3 and pixels.shape[2] == 1
                               else pixels)
    if arr.dtype == np.uint16:
        image = Image.frombuffer("I;16", (arr.shape[1], arr.shape[0]),
                                 arr.astype("<u2").tobytes(), "raw", "I;16", 0, 1)
    else:
        image = Image.fromarray(arr)
    return _encoded(image)


def display_png(pixels: np.ndarray, peak: float) -> bytes:
    """A picture made for looking at: levels stretched to 0..255 when the data's range is
    smaller (digits' 0..16) or larger (16-bit), upscaled to at least DISPLAY_MIN_SIDE."""
    from PIL import Image  # noqa: PLC0415

    arr = np.asarray(pixels, np.float64)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    scale = 255.0 / peak if peak and peak != 255 else 1.0
    image = Image.fromarray(np.clip(np.rint(arr * scale), 0, 255).astype(np.uint8))
    factor = max(1, int(np.ceil(DISPLAY_MIN_SIDE / max(image.size))))
    if factor > 1:
        image = image.resize((image.size[0] * factor, image.size[1] * factor), Image.NEAREST)
    return _encoded(image)


def _encoded(image: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")  # type: ignore[attr-defined]
    return out.getvalue()


# ---- storing image files: other formats, resize, pad ----------------------------------------
# Pillow format -> the encoding whose bytes it already is (MPO: a camera JPEG with extra
# previews; every JPEG decoder reads its first, main image)
AS_ENCODING = {"PNG": "png", "JPEG": "jpeg", "MPO": "jpeg"}
# formats stored after a decode with Pillow (re-encoded once to the feature's encoding)
PILLOW_FORMATS = ("PNG", "JPEG", "MPO", "GIF", "BMP", "TIFF", "WEBP")
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_WIDE_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")  # 16/32-bit or float pixels


class ImageProblem(Exception):
    """An image that cannot be stored as the feature asks: `code` is its REASONS code."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def feature_pixels(img: Any, feature: Feature, what: str = "image") -> Any:
    """The Pillow image in the feature's channels (1 -> L, 3 -> RGB, 4 -> RGBA, as
    tf.io.decode_png/jpeg convert: grey -> RGB, alpha dropped, palettes expanded). 16-bit
    grey stays 16-bit for a uint16 one-channel feature; other 16-bit, 32-bit or float pixels
    are refused (`unsupported_image`): an 8-bit copy would clip or scale their values."""
    channels = feature.shape[-1]
    if img.mode in _WIDE_MODES:
        if feature.dtype == "uint16" and channels == 1 and img.mode.startswith("I;16"):
            return img
        raise ImageProblem("unsupported_image", f"a {what} of {img.mode} pixels (16-bit, "
                                                f"32-bit or float): storing it as "
                                                f"{feature.dtype} x {channels} channel(s) "
                                                f"would change its values; convert it to "
                                                f"8-bit first")
    return img if img.mode == _MODES[channels] else img.convert(_MODES[channels])


def encoded(img: Any, encoding: str) -> bytes:
    """One Pillow image as PNG (lossless) or JPEG (quality 95, as `encode_pixels`
    encodes pixel arrays)."""
    out = io.BytesIO()
    if encoding == "png":
        img.save(out, format="PNG")
    else:
        img.save(out, format="JPEG", quality=95)
    return out.getvalue()


def fit_image(feature: Feature, blob: bytes) -> bytes:
    """An encoded image (any format Pillow reads) at the feature's fixed size, by its rule:
    `resize: [H, W]`: Pillow's `Image.resize((W, H), Resampling.BILINEAR)` (aspect ratio not
    kept; when shrinking, Pillow widens the filter to cover every source pixel);
    `pad: [H, W]`: the image at the top-left of an H x W canvas of zeros (padding bottom and
    right); an image taller or wider than the pad is refused (`wrong_shape`), never cropped.
    Encoded once to the feature's encoding. Raises ImageProblem."""
    from PIL import Image  # noqa: PLC0415

    height, width = feature.shape[0], feature.shape[1]
    try:
        with Image.open(io.BytesIO(blob)) as img:
            img.load()
            kind = img.format or "image"
            pixels = feature_pixels(img, feature, f"{kind} image")
    except ImageProblem:
        raise
    except Exception as e:  # Pillow raises many types for broken files
        raise ImageProblem("bad_image", f"cannot read image: {why_unreadable(e)}") from e
    if feature.resize:
        if pixels.size != (width, height):
            pixels = pixels.resize((width, height), Image.Resampling.BILINEAR)
    else:
        w, h = pixels.size
        too_big = pad_problem(feature, h, w, kind)
        if too_big:
            raise ImageProblem("wrong_shape", too_big)
        if (w, h) != (width, height):
            canvas = Image.new(pixels.mode, (width, height), 0)
            canvas.paste(pixels, (0, 0))
            pixels = canvas
    return encoded(pixels, feature.encoding)


def pad_problem(feature: Feature, h: int, w: int, kind: str) -> str | None:
    """Why an h x w image does not fit the feature's `pad`, or None (it fits, or no pad)."""
    if not feature.pad:
        return None
    height, width = feature.pad
    if h <= height and w <= width:
        return None
    return (f"{kind} image is {h}x{w} (height x width), larger than pad: [{height}, {width}] "
            f"(padding never crops; use resize: [{height}, {width}] or a larger pad)")


def why_unreadable(error: Exception) -> str:
    from PIL import UnidentifiedImageError  # noqa: PLC0415

    if isinstance(error, UnidentifiedImageError):  # its message only names a BytesIO
        return "not an image Pillow reads, or its header is cut off"
    return f"{type(error).__name__}: {error}"


# ---- pixel values as stored images (etl.contract.columns) ------------------------------------
def encode_pixels(feature: Feature, pixels: np.ndarray) -> bytes:
    """One record's pixel values (a fixed-shape png/jpeg feature) encoded: PNG (16-bit RGB/RGBA
    by `_png16`) or JPEG at quality 95."""
    from PIL import Image  # noqa: PLC0415

    img = pixels.reshape(feature.shape)
    if feature.encoding == "png" and img.dtype.itemsize == 2 and img.shape[-1] > 1:
        return _png16(img)  # Pillow has no 16-bit RGB / RGBA mode
    if img.shape[-1] == 1:
        img = img[..., 0]
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG" if feature.encoding == "png" else "JPEG",
                              quality=95)
    return buf.getvalue()


def _png16(img: np.ndarray) -> bytes:
    """A 16-bit [h, w, 3|4] image as PNG (IHDR, one zlib IDAT of unfiltered rows, IEND)."""
    h, w, c = img.shape
    color_type = {3: 2, 4: 6}[c]  # PNG colour types RGB, RGBA
    rows = np.ascontiguousarray(img.astype(">u2")).view(np.uint8).reshape(h, w * c * 2)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows], axis=1).tobytes()  # filter 0

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    return (_PNG_MAGIC + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6))
            + chunk(b"IEND", b""))


# ---- image headers: PNG IHDR and JPEG frame header, read before a blob is stored ----------
# PNG colour type -> allowed bit depths (PNG spec, 11.2.2 IHDR)
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
# JPEG start-of-frame markers (baseline, progressive, ...): C0-CF except DHT, JPG, DAC
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_header_problems(feature: Feature, blobs: pa.Array, check: np.ndarray) -> dict[int, _Why]:
    """Blob index -> why, for the `check`ed PNG/JPEG blobs whose header is broken
    (`bad_image`) or whose height and width differ from the feature's shape (`wrong_shape`).

    Only headers are read (PNG IHDR: vectorised over the batch; JPEG: a walk over the
    segment markers up to the frame header, a few steps per image), nothing is decoded.
    Channels and bit depth are not compared: tf.io.decode_png/decode_jpeg convert them to
    the schema's (grey -> RGB, 16 -> 8 bit), so such an image reads back in the declared
    shape, while another height or width would fail `make_dataset`.
    """
    n = len(blobs)
    if not n or not check.any():
        return {}
    blobs = blobs.cast(pa.large_binary())
    buffers = blobs.buffers()
    offsets = np.frombuffer(buffers[1], np.int64)[blobs.offset: blobs.offset + n + 1]
    data = (np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None
            else np.zeros(0, np.uint8))
    height, width = feature.shape[0], feature.shape[1]  # -1, -1: any size, not compared
    if feature.encoding == "png":
        return _png_problems(feature, data, offsets, check, height, width)
    return _jpeg_problems(data, offsets, check, height, width, feature)


def _png_problems(feature: Feature, data: np.ndarray, offsets: np.ndarray, check: np.ndarray,
                  height: int, width: int) -> dict[int, _Why]:
    out: dict[int, _Why] = {}
    size = 33  # signature 8 + IHDR chunk length 4 + type 4 + data 13 (no CRC needed)
    lengths = np.diff(offsets)
    short = check & (lengths < size)
    for i in np.flatnonzero(short).tolist():
        signed = bytes(data[offsets[i]: offsets[i] + 8]) == _PNG_MAGIC
        what = "PNG header is truncated" if signed else "not a PNG image"
        out[i] = ("bad_image", f"{what} ({int(lengths[i])} bytes)")
    rows = np.flatnonzero(check & ~short)
    if not len(rows):
        return out
    head = data[offsets[:-1][rows][:, None] + np.arange(size)[None, :]]
    magic = np.frombuffer(_PNG_MAGIC, np.uint8)
    not_png = ~(head[:, :8] == magic).all(axis=1)
    no_ihdr = ~(head[:, 12:16] == np.frombuffer(b"IHDR", np.uint8)).all(axis=1)
    be = np.array([1 << 24, 1 << 16, 1 << 8, 1], np.int64)
    w = head[:, 16:20].astype(np.int64) @ be
    h = head[:, 20:24].astype(np.int64) @ be
    depth, ctype = head[:, 24], head[:, 25]
    bad_combo = np.ones(len(rows), bool)
    for c, depths in _PNG_DEPTHS.items():
        bad_combo &= ~((ctype == c) & np.isin(depth, depths))
    broken = not_png | no_ihdr | bad_combo | (w == 0) | (h == 0)
    wrong = ~broken & ((h != height) | (w != width)) & (height > 0)
    for j in np.flatnonzero(broken | wrong).tolist():
        i = int(rows[j])
        if not_png[j]:
            out[i] = ("bad_image", "not a PNG image (no PNG signature)")
        elif no_ihdr[j]:
            out[i] = ("bad_image", "PNG header is broken (no IHDR chunk first)")
        elif broken[j]:
            out[i] = ("bad_image", f"PNG header is broken (colour type {int(ctype[j])}, "
                                   f"bit depth {int(depth[j])}, {int(h[j])}x{int(w[j])})")
        else:
            channels = _PNG_CHANNELS.get(int(ctype[j]), 0)
            out[i] = ("wrong_shape", f"PNG image is {int(h[j])}x{int(w[j])}x{channels} "
                                     f"(height x width x channels), shape {list(feature.shape)} "
                                     f"expects {height}x{width}")
    return out


def _jpeg_problems(data: np.ndarray, offsets: np.ndarray, check: np.ndarray, height: int,
                   width: int, feature: Feature) -> dict[int, _Why]:
    """Walk the segments of all checked JPEGs at once (one NumPy step per segment: a few
    steps for camera and Pillow files); a blob with anything unusual (fill bytes, a marker
    without length, a short or broken segment) is walked alone by `_jpeg_frame`, which also
    words the reason."""
    out: dict[int, _Why] = {}
    idx = np.flatnonzero(check)
    starts, ends = offsets[:-1][idx], offsets[1:][idx]
    frames = np.zeros((len(idx), 3), np.int64)  # h, w, components once the frame header is found
    found = np.zeros(len(idx), bool)
    long_enough = ends - starts >= 12
    safe = np.where(long_enough, starts, 0)
    active = long_enough & (data[safe] == 0xFF) & (data[safe + 1] == 0xD8) if len(data) else (
        np.zeros(len(idx), bool))
    alone = ~active  # walked one by one below
    pos = starts + 2
    sof_markers = np.array(sorted(_JPEG_SOF), np.uint8)
    while active.any():
        a = np.flatnonzero(active)
        p = pos[a]
        room = p + 10 <= ends[a]
        p = np.where(room, p, starts[a])
        marker = data[p + 1]
        length = data[p + 2].astype(np.int64) << 8 | data[p + 3]
        plain = room & (data[p] == 0xFF) & (marker >= 0xC0) & (marker != 0xFF) & (
            (marker < 0xD0) | (marker > 0xDA)) & (length >= 2)
        sof = plain & np.isin(marker, sof_markers) & (length >= 8)
        frames[a[sof]] = np.stack([data[p + 5].astype(np.int64) << 8 | data[p + 6],
                                   data[p + 7].astype(np.int64) << 8 | data[p + 8],
                                   data[p + 9]], axis=1)[sof]
        found[a[sof]] = True
        alone[a[~plain | (np.isin(marker, sof_markers) & ~sof)]] = True
        active[a[~plain | sof]] = False
        step = plain & ~sof
        pos[a[step]] += 2 + length[step]
    h, w, components = frames[:, 0], frames[:, 1], frames[:, 2]
    broken = found & ((h == 0) | (w == 0) | (components == 0))
    alone |= broken
    wrong = found & ~broken & ((h != height) | (w != width)) & (height > 0)
    for j in np.flatnonzero(wrong).tolist():
        out[int(idx[j])] = ("wrong_shape", f"JPEG image is {h[j]}x{w[j]}x{components[j]} (height "
                                           f"x width x channels), shape {list(feature.shape)} "
                                           f"expects {height}x{width}")
    mv = memoryview(data)
    for j in np.flatnonzero(alone).tolist():
        i = int(idx[j])
        frame = _jpeg_frame(mv, int(offsets[i]), int(offsets[i + 1]))
        if isinstance(frame, str):
            out[i] = ("bad_image", frame)
        elif height > 0 and (frame[0] != height or frame[1] != width):
            out[i] = ("wrong_shape", f"JPEG image is {frame[0]}x{frame[1]}x{frame[2]} (height x "
                                     f"width x channels), shape {list(feature.shape)} expects "
                                     f"{height}x{width}")
    return out


def _jpeg_frame(mv: memoryview, start: int, end: int) -> tuple[int, int, int] | str:
    """(height, width, components) from the first SOF segment, or why it cannot be read."""
    if end - start < 4 or mv[start] != 0xFF or mv[start + 1] != 0xD8:
        return "not a JPEG image (no SOI marker)"
    pos = start + 2
    while pos + 4 <= end:
        if mv[pos] != 0xFF:
            return f"JPEG header is broken (no marker at byte {pos - start})"
        marker = mv[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):
            return "JPEG header is broken (image data before a frame header)"
        length = (mv[pos + 2] << 8) | mv[pos + 3]
        if length < 2:
            return f"JPEG header is broken (segment length {length} at byte {pos - start})"
        if marker in _JPEG_SOF:
            if pos + 10 > end or length < 8:
                return "JPEG frame header is truncated"
            h = (mv[pos + 5] << 8) | mv[pos + 6]
            w = (mv[pos + 7] << 8) | mv[pos + 8]
            components = mv[pos + 9]
            if h == 0 or w == 0 or components == 0:
                return f"JPEG frame header is broken ({h}x{w}, {components} components)"
            return h, w, components
        pos += 2 + length
    return "JPEG header is truncated (no frame header)"
