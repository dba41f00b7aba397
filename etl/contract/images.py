"""Which features are pictures, and pictures as PNG: one rule for `inspect --images` and the
dataset report, so a feature one shows as an image the other shows too.

A picture is a per-record (not sequence) fixed-shape feature that decodes to pixels a PNG
holds: uint8 [H, W] or [H, W, 1|3|4], uint16 [H, W] or [H, W, 1], whatever the encoding (raw
bytes, int64 values, png, jpeg). Pillow is imported only inside the functions.

Also how image files become stored images (the image folder source and the encoder share
it): GIF/BMP/TIFF/WebP decoded and encoded once to the feature's png/jpeg, and the
`resize`/`pad` rules (`fit_image`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from etl.contract.schema import Feature

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
    """One Pillow image as PNG (lossless) or JPEG (quality 95, as etl.contract.columns
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
