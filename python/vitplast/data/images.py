"""Decoding one image file: `open_image` gives an RGB PIL image, or `BadImageError` naming the
file and the reason.

Only regular files are opened (a FIFO, socket or device is refused without being opened: reading it
could block forever). Pixel values keep their meaning: 8-bit images are read as they are; 16-bit
images (PIL modes ``I;16*``, and mode ``I`` when its values fit in 16 bits) are scaled by 65535 to the
8-bit range the transforms expect (``round(v * 255 / 65535)``), so a 16-bit copy of a picture gives the
8-bit picture's values; a mode without a defined range (``F``: floating point; ``I`` with values
beyond 16 bits) is refused by name.
"""

from __future__ import annotations

import os
import stat

SIXTEEN_BIT_MAX = 65535


class BadImageError(ValueError):
    """An image file that cannot be decoded; ``.path`` names it."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"cannot read image {path!r} ({reason}): fix or remove it, or skip such files "
                         "(--skip-bad-images / skip_bad_images=True)")
        self.path = path


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (``st_mode``)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _sixteen_bit(img, path: str):
    """A 16-bit (or mode ``I``) grey image as 8-bit grey, scaled by 65535; BadImageError beyond 16 bits."""
    import numpy as np
    from PIL import Image

    values = np.asarray(img)
    lo, hi = (int(values.min()), int(values.max())) if values.size else (0, 0)
    if lo < 0 or hi > SIXTEEN_BIT_MAX:
        raise BadImageError(path, f"mode {img.mode} with values {lo}..{hi}, beyond 16 bits: no defined range "
                                  "to scale from; save it as an 8- or 16-bit image")
    scaled = np.rint(values.astype(np.float64) * (255.0 / SIXTEEN_BIT_MAX)).astype(np.uint8)
    return Image.fromarray(scaled, mode="L")


def open_image(path: str):
    """The image at ``path`` decoded in full, as RGB; `BadImageError` when it cannot be."""
    from PIL import Image

    try:
        st = os.stat(path)
    except OSError as exc:
        raise BadImageError(path, exc.strerror or type(exc).__name__) from None
    if not stat.S_ISREG(st.st_mode):
        raise BadImageError(path, f"{file_kind(st.st_mode)}, not a regular file; not opened")
    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            img.load()  # decodes now: a truncated file fails here, not later inside a transform
            if img.mode == "F":
                raise BadImageError(path, "mode F (floating point) has no defined range of values; save it "
                                          "as an 8- or 16-bit image")
            if img.mode == "I" or img.mode.startswith("I;16"):
                img = _sixteen_bit(img, path)
            return img.convert("RGB")
    except BadImageError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadImageError(path, str(exc).strip().splitlines()[0] if str(exc).strip() else
                            type(exc).__name__) from None
