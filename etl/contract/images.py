"""Which features are pictures, and pictures as PNG: one rule for `inspect --images` and the
dataset report, so a feature one shows as an image the other shows too.

A picture is a per-record (not sequence) fixed-shape feature that decodes to pixels a PNG
holds: uint8 [H, W] or [H, W, 1|3|4], uint16 [H, W] or [H, W, 1], whatever the encoding (raw
bytes, int64 values, png, jpeg). Pillow is imported only inside the functions.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

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
