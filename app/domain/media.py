"""Images users attach: checked against the limits in ImageSettings, decoded with Pillow and re-encoded as plain
PNG or JPEG before they are stored or shown to a model. Every failure is an ImageError whose message says what to do;
no other exception escapes for any bytes."""

from __future__ import annotations

import base64
import binascii
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageOps

from app.config import ImageSettings

IMAGE_TYPES: tuple[str, ...] = ("png", "jpg", "jpeg", "webp", "gif")  # what the uploaders accept
_PILLOW_FORMATS = ["PNG", "JPEG", "WEBP", "GIF"]  # Image.open tries these plugins only (never BMP, TIFF, PDF...)
_JPEG_FORMATS = ("JPEG", "MPO")  # phones write multi-picture JPEGs, which Pillow calls MPO
_MB = 2**20
_UNSUPPORTED = "is not a PNG, JPEG, WebP or GIF image: convert it to one of these and attach it again"


class ImageError(ValueError):
    """An image that cannot be used; the message is meant for the user and names the file when known."""


@dataclass(frozen=True)
class PreparedImage:
    """An image made safe to store and show: decoded, scaled down, re-encoded without metadata."""

    data: bytes
    mime: str  # "image/png" or "image/jpeg"
    width: int
    height: int


def sniff_mime(data: bytes) -> str:
    """The image type from the file's first bytes (the same test Pillow's plugins make)."""
    mime = _sniff(data)
    if mime is None:
        raise ImageError(f"The data {_UNSUPPORTED}.")
    return mime


def _sniff(data: bytes) -> str | None:
    head = bytes(data[:12])
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def prepare_image(data: bytes, name: str = "image", settings: ImageSettings | None = None) -> PreparedImage:
    """`data` checked and made safe: first frame only, EXIF orientation applied, transparency flattened onto white,
    RGB, longer side at most settings.max_side, re-encoded (JPEG stays JPEG, everything else becomes PNG) without
    EXIF, ICC or text metadata."""
    settings = settings or ImageSettings.from_env()
    _check_size(len(data), name, settings.max_mb)
    image, source_format = _decode(data, name, settings.max_pixels, settings.max_side)
    image.info = {}  # PNG's encoder would copy an ICC profile or transparency from here into the output
    out = io.BytesIO()
    try:
        if source_format in _JPEG_FORMATS:
            image.save(out, "JPEG", quality=90)
            mime = "image/jpeg"
        else:
            image.save(out, "PNG")
            mime = "image/png"
    except MemoryError as exc:
        raise ImageError(f"{name} is too large to process in the memory available: scale it down and attach it "
                         "again.") from exc
    except Exception as exc:  # an encoder failing on a decoded image is unexpected; still the user's file to fix
        raise _damaged(name) from exc
    return PreparedImage(data=out.getvalue(), mime=mime, width=image.width, height=image.height)


def open_rgb(data: bytes, max_side: int | None = None) -> Image.Image:
    """Prepared image bytes decoded to an RGB image for a model backend, scaled down (aspect kept) so its longer
    side is at most `max_side` when given. The same checks as prepare_image apply: stored conversations and API
    requests are input too."""
    image, _ = _decode(data, "The image", ImageSettings.from_env().max_pixels, max_side)
    return image


def fit_within(image: Image.Image, max_side: int) -> Image.Image:
    """`image` scaled down (aspect kept, LANCZOS) so that its longer side is at most `max_side`; the image itself
    when it already fits. Pillow resizes palette and 1-bit images with nearest neighbour: convert those first."""
    if max_side < 1:
        raise ValueError(f"max_side must be at least 1, not {max_side}")
    width, height = image.size
    longer = max(width, height)
    if longer <= max_side:
        return image
    size = (max(1, round(width * max_side / longer)), max(1, round(height * max_side / longer)))
    # reducing_gap: a cheap box reduction first for very large images, with no visible difference.
    return image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def check_message_images(images: Sequence[PreparedImage] | Sequence[bytes],
                         settings: ImageSettings | None = None) -> None:
    """Refuse the images of one message when there are too many or they are too large together."""
    settings = settings or ImageSettings.from_env()
    if len(images) > settings.max_per_message:
        raise ImageError(f"A message can carry at most {settings.max_per_message} images and this one has "
                         f"{len(images)}: send the others in another message.")
    total = sum(len(image.data if isinstance(image, PreparedImage) else image) for image in images)
    if total > settings.max_message_mb * _MB:
        raise ImageError(f"The images of this message are {_megabytes(total)} MB together, more than the "
                         f"{settings.max_message_mb:g} MB one message may carry: send fewer or smaller images.")


def to_data_url(data: bytes, mime: str | None = None) -> str:
    """`data` inline as a `data:` URL; the media type is read from the bytes when not given."""
    return f"data:{mime or sniff_mime(data)};base64,{base64.b64encode(data).decode('ascii')}"


def from_data_url(url: str, settings: ImageSettings | None = None) -> bytes:
    """The bytes of a `data:image/...;base64,...` URL, refused before decoding when larger than settings.max_mb."""
    example = "data:image/png;base64,..."
    if not isinstance(url, str) or url[:5].lower() != "data:":
        raise ImageError(f"An image must be sent inline as a data URL ({example}).")
    header, comma, payload = url[5:].partition(",")
    params = [param.strip().lower() for param in header.split(";")]
    if not comma:
        raise ImageError(f"The image data URL has no comma before its data; it should look like {example}.")
    if not params[0].startswith("image/"):
        media_type = params[0] or "text/plain"  # what an empty media type means in a data URL
        raise ImageError(f"The data URL holds {media_type}, not an image; send a PNG, JPEG, WebP or GIF as {example}.")
    if params[-1] != "base64":
        raise ImageError(f"The image data URL must be base64-encoded ({example}).")
    settings = settings or ImageSettings.from_env()
    limit = settings.max_mb * _MB
    if len(payload) > 4 * math.ceil(limit / 3):  # base64 turns every 3 bytes into 4 characters
        raise _too_large("The image", len(payload) * 3 / 4, settings.max_mb)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"The image data URL is not valid base64 (no spaces or line breaks; {example}).") from exc
    if not data:
        raise ImageError(f"The image data URL holds no data; it should look like {example}.")
    _check_size(len(data), "The image", settings.max_mb)
    return data


# ----- decoding ----------------------------------------------------------------------------------------------------

def _check_size(size: int, name: str, max_mb: float) -> None:
    if size == 0:
        raise ImageError(f"{name} is empty: attach the image file again.")
    if size > max_mb * _MB:
        raise _too_large(name, size, max_mb)


def _too_large(name: str, size: float, max_mb: float) -> ImageError:
    return ImageError(f"{name} is {_megabytes(size)} MB, more than the {max_mb:g} MB one image may have: scale it down "
                      "or save it as JPEG, then attach it again.")


def _megabytes(size: float) -> str:
    mb = size / _MB
    return f"{mb:.0f}" if mb >= 1000 else f"{mb:.3g}"  # three digits: 0.0286 and 20.4, never "0.0"


def _damaged(name: str) -> ImageError:
    return ImageError(f"{name} could not be read as an image (the file is damaged or incomplete): open it in an "
                      "image editor, save it again as PNG or JPEG, and attach that.")


def _too_many_pixels(name: str, max_pixels: int, size: tuple[int, int] | None = None) -> ImageError:
    limit = min(max_pixels, Image.MAX_IMAGE_PIXELS or max_pixels)  # Pillow's own bomb check refuses above its own
    found = f"is {size[0]}x{size[1]} pixels," if size else "has"
    return ImageError(f"{name} {found} more than the limit of {limit:,} pixels (width x height): scale it down and "
                      "attach it again.")


def _decode(data: bytes, name: str, max_pixels: int, max_side: int | None) -> tuple[Image.Image, str]:
    """The first frame of `data` as an upright RGB image no larger than max_side, and Pillow's name of its format."""
    if not data:
        raise ImageError(f"{name} is empty: attach the image file again.")
    if _sniff(data) is None:  # before Pillow, which would call a damaged PNG "unidentified" as well
        raise ImageError(f"{name} {_UNSUPPORTED}.")
    try:
        # Never above Pillow's own bomb threshold (Image.MAX_IMAGE_PIXELS, left as it is): its warning there is only
        # logged (turning warnings into errors is process-wide, not thread-safe), so this check must refuse first.
        limit = min(max_pixels, Image.MAX_IMAGE_PIXELS or max_pixels)
        image = Image.open(io.BytesIO(data), formats=_PILLOW_FORMATS)
        source_format = image.format or ""
        if image.width * image.height > limit:  # from the header: no pixel decoded yet
            raise _too_many_pixels(name, max_pixels, image.size)
        if max_side and source_format in _JPEG_FORMATS:
            image.draft(None, (max_side, max_side))  # JPEG decodes at 1/2, 1/4 or 1/8 scale, both sides >= max_side
        image.load()  # the first frame of an animation: Pillow opens at frame 0 and is never moved on
        rgb = _to_rgb(image)
        if max_side:
            rgb = fit_within(rgb, max_side)
        return _upright(rgb), source_format
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_many_pixels(name, max_pixels) from exc
    except MemoryError as exc:
        raise ImageError(f"{name} is too large to decode in the memory available: scale it down and attach it "
                         "again.") from exc
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, EOFError, struct.error... on bad data
        raise _damaged(name) from exc


def _to_rgb(image: Image.Image) -> Image.Image:
    """RGB, with transparent parts on white (a model shown black behind a transparent logo sees a black box)."""
    if image.mode in ("I", "I;16", "I;16L", "I;16B", "I;16N"):  # 16-bit grey: scale, as convert() would clip to white
        image = image.convert("I").point(lambda value: value / 256).convert("L")
        image.info.pop("transparency", None)  # a 16-bit transparent value no longer matches any pixel
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, "white")
        background.paste(rgba, mask=rgba.getchannel("A"))
        # Keeps the EXIF that _upright reads; the transparency belongs to the pixels just flattened.
        background.info = {key: value for key, value in image.info.items() if key != "transparency"}
        return background
    return image.convert("RGB")


def _upright(image: Image.Image) -> Image.Image:
    """The image turned as its EXIF orientation says; unturned when the EXIF block is unreadable."""
    try:
        return ImageOps.exif_transpose(image)
    except Exception:  # broken EXIF in an otherwise good picture should not cost the picture
        return image
