"""app/domain/media.py: every image is decoded, limited and re-encoded before it is stored or shown to a model, and
nothing but ImageError comes out of it for any bytes. All images are built here with Pillow."""

from __future__ import annotations

import base64
import io
import random
import struct
import warnings
import zlib

import pytest
from PIL import Image, ImageCms

from app.config import ImageSettings
from app.domain.media import (
    IMAGE_TYPES,
    ImageError,
    PreparedImage,
    check_message_images,
    fit_within,
    from_data_url,
    open_rgb,
    prepare_image,
    sniff_mime,
    to_data_url,
)

SMALL = ImageSettings(max_mb=1, max_message_mb=2, max_per_message=3, max_pixels=1_000_000, max_side=256)


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def halves(size: tuple[int, int] = (40, 20), left: str = "red", right: str = "blue") -> Image.Image:
    """Left half one colour, right half another: shows which way an image was turned."""
    image = Image.new("RGB", size, left)
    image.paste(right, (size[0] // 2, 0, size[0], size[1]))
    return image


def decoded(prepared: PreparedImage) -> Image.Image:
    image = Image.open(io.BytesIO(prepared.data))
    image.load()
    return image


def close(pixel: tuple[int, ...], expected: tuple[int, int, int], tolerance: int = 12) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, expected, strict=True))


def png_claiming(width: int, height: int) -> bytes:
    """A real 1x1 PNG whose IHDR says width x height (CRC recomputed): only the header is big."""
    data = bytearray(encode(Image.new("L", (1, 1)), "PNG"))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


# ----- the happy paths -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/png"),
                                           ("GIF", "image/png")])
def test_each_format_comes_out_as_png_or_jpeg_with_its_pixels(fmt, mime):
    source = encode(halves((64, 32), "red", "blue"), fmt)
    prepared = prepare_image(source, f"picture.{fmt.lower()}", SMALL)
    assert (prepared.mime, prepared.width, prepared.height) == (mime, 64, 32)
    assert sniff_mime(prepared.data) == mime
    image = decoded(prepared)
    assert image.mode == "RGB" and image.size == (64, 32)
    assert close(image.getpixel((8, 16)), (255, 0, 0), 40) and close(image.getpixel((56, 16)), (0, 0, 255), 40)


def test_upload_types_are_the_formats_taken():
    assert IMAGE_TYPES == ("png", "jpg", "jpeg", "webp", "gif")


def test_transparent_pixels_become_white():
    image = Image.new("RGBA", (10, 10), (255, 0, 0, 255))
    image.paste((0, 255, 0, 0), (5, 0, 10, 10))  # fully transparent green: must not show as green or black
    prepared = decoded(prepare_image(encode(image, "PNG"), "logo.png", SMALL))
    assert prepared.mode == "RGB"
    assert prepared.getpixel((2, 2)) == (255, 0, 0) and prepared.getpixel((7, 7)) == (255, 255, 255)


@pytest.mark.parametrize("mode", ["LA", "P"])
def test_transparency_of_grey_and_palette_images_becomes_white(mode):
    image = Image.new("RGBA", (10, 10), (0, 0, 0, 255))
    image.paste((0, 0, 0, 0), (5, 0, 10, 10))
    source = image.convert("LA") if mode == "LA" else image.convert("RGB").convert("P")
    options = {}
    if mode == "P":  # palette index of the right half marked transparent (tRNS)
        source.paste(1, (5, 0, 10, 10))
        options = {"transparency": 1}
    out = decoded(prepare_image(encode(source, "PNG", **options), "icon.png", SMALL))
    assert out.getpixel((2, 2)) == (0, 0, 0) and out.getpixel((7, 7)) == (255, 255, 255)


def test_exif_orientation_is_applied_and_metadata_is_stripped():
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    exif[0x010F] = "SecretCam"  # Make
    source = encode(halves((40, 20), "red", "blue"), "JPEG", exif=exif, quality=95)
    prepared = prepare_image(source, "photo.jpg", SMALL)
    assert (prepared.mime, prepared.width, prepared.height) == ("image/jpeg", 20, 40)
    image = decoded(prepared)
    assert close(image.getpixel((10, 5)), (255, 0, 0), 40)  # the left half is now on top
    assert close(image.getpixel((10, 35)), (0, 0, 255), 40)
    assert not image.getexif() and "exif" not in image.info and b"SecretCam" not in prepared.data


def test_png_metadata_and_icc_profile_are_not_copied():
    from PIL import PngImagePlugin

    text = PngImagePlugin.PngInfo()
    text.add_text("Author", "someone@example.com")
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    source = encode(Image.new("RGB", (8, 8), "red"), "PNG", pnginfo=text, icc_profile=icc)
    image = decoded(prepare_image(source, "a.png", SMALL))
    assert not {"Author", "icc_profile", "exif"} & set(image.info)


def test_an_animated_gif_gives_its_first_frame():
    frames = [Image.new("RGB", (16, 16), colour) for colour in ("red", "lime", "blue")]
    source = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert Image.open(io.BytesIO(source)).n_frames == 3
    image = decoded(prepare_image(source, "anim.gif", SMALL))
    assert image.getpixel((8, 8)) == (255, 0, 0)


def test_an_animated_webp_gives_its_first_frame():
    frames = [Image.new("RGB", (16, 16), colour) for colour in ("blue", "red")]
    source = encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100, lossless=True)
    image = decoded(prepare_image(source, "anim.webp", SMALL))
    assert close(image.getpixel((8, 8)), (0, 0, 255))


def test_a_multi_picture_jpeg_from_a_phone_stays_jpeg():
    source = encode(Image.new("RGB", (16, 16), "red"), "MPO", save_all=True,
                    append_images=[Image.new("RGB", (16, 16), "blue")])
    prepared = prepare_image(source, "phone.jpg", SMALL)
    assert prepared.mime == "image/jpeg" and close(decoded(prepared).getpixel((8, 8)), (255, 0, 0))


def test_cmyk_jpeg_and_16_bit_grey_png_come_out_rgb_with_their_colours():
    cmyk = prepare_image(encode(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), "JPEG"), "print.jpg", SMALL)
    assert close(decoded(cmyk).getpixel((4, 4)), (255, 0, 0), 30)
    grey = prepare_image(encode(Image.new("I;16", (8, 8), 32768), "PNG"), "scan.png", SMALL)
    assert close(decoded(grey).getpixel((4, 4)), (128, 128, 128), 2)  # scaled, not clipped to white


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_big_image_is_scaled_down_keeping_its_aspect(fmt):
    source = encode(halves((1200, 300)), fmt)
    prepared = prepare_image(source, "wide", ImageSettings(max_side=400))
    assert (prepared.width, prepared.height) == (400, 100)
    assert decoded(prepared).size == (400, 100)
    small = prepare_image(encode(halves((40, 20)), fmt), "small", ImageSettings(max_side=400))
    assert (small.width, small.height) == (40, 20)  # never scaled up


def test_fit_within_and_open_rgb():
    tall = Image.new("RGB", (300, 900), "red")
    assert fit_within(tall, 90).size == (30, 90)
    assert fit_within(tall, 900) is tall
    with pytest.raises(ValueError):
        fit_within(tall, 0)
    image = open_rgb(encode(Image.new("RGBA", (300, 100), (0, 0, 0, 0)), "PNG"), max_side=60)
    assert image.mode == "RGB" and image.size == (60, 20) and image.getpixel((5, 5)) == (255, 255, 255)
    assert open_rgb(encode(Image.new("L", (30, 10), 0), "PNG")).size == (30, 10)
    with pytest.raises(ImageError):
        open_rgb(b"not an image")


# ----- refusals ------------------------------------------------------------------------------------------------

def test_a_pixel_bomb_is_refused_from_its_header():
    # 20000 x 20000 = 400 million pixels claimed by a 70-byte file; decoding it would need 1.2 GB.
    with pytest.raises(ImageError, match="pixels") as refused:
        prepare_image(png_claiming(20000, 20000), "bomb.png", ImageSettings())
    assert "limit" in str(refused.value) and "bomb.png" in str(refused.value)
    # Under Pillow's own warning threshold (89 M) but over ours (50 M): refused by our check, with its size.
    with pytest.raises(ImageError, match=r"8000x8000 pixels, more than the limit of 50,000,000 pixels"):
        prepare_image(png_claiming(8000, 8000), "big.png", ImageSettings())


def test_the_pixel_limit_is_a_setting_and_global_state_is_left_alone():
    filters, max_pixels = list(warnings.filters), Image.MAX_IMAGE_PIXELS
    source = encode(Image.new("RGB", (20, 20)), "PNG")
    with pytest.raises(ImageError, match="20x20 pixels, more than the limit of 100 pixels"):
        prepare_image(source, "a.png", ImageSettings(max_pixels=100))
    with pytest.raises(ImageError, match="pixels"):
        prepare_image(png_claiming(20000, 20000), "bomb.png")
    assert prepare_image(source, "a.png", ImageSettings(max_pixels=400)).width == 20
    assert warnings.filters == filters and Image.MAX_IMAGE_PIXELS == max_pixels


@pytest.mark.parametrize(("data", "what"), [
    (encode(Image.new("RGB", (8, 8)), "BMP"), "bmp"),
    (encode(Image.new("RGB", (8, 8)), "TIFF"), "tiff"),
    (encode(Image.new("RGB", (8, 8)), "PDF"), "pdf"),
    (b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>', "svg"),
    (b"just some text", "text"),
    (random.Random(1).randbytes(2000), "random bytes"),
])
def test_other_formats_are_refused_by_name(data, what):
    with pytest.raises(ImageError, match=r"^upload\.bin is not a PNG, JPEG, WebP or GIF image"):
        prepare_image(data, "upload.bin", SMALL)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_a_truncated_image_is_called_damaged(fmt):
    noise = Image.frombytes("RGB", (64, 64), random.Random(2).randbytes(64 * 64 * 3))
    source = encode(noise, fmt)
    for cut in (len(source) // 2, 20):
        with pytest.raises(ImageError, match=r"photo could not be read as an image \(the file is damaged"):
            prepare_image(source[:cut], "photo", SMALL)


def test_empty_and_oversized_files_are_refused_before_decoding():
    with pytest.raises(ImageError, match="empty.png is empty"):
        prepare_image(b"", "empty.png", SMALL)
    noise = Image.frombytes("RGB", (100, 100), random.Random(3).randbytes(30000))
    source = encode(noise, "PNG")
    with pytest.raises(ImageError, match=r"huge.png is 0.0\d+ MB, more than the 0.01 MB one image may have"):
        prepare_image(source, "huge.png", ImageSettings(max_mb=0.01))


def test_settings_come_from_the_environment(monkeypatch):
    assert ImageSettings() == ImageSettings(max_mb=20, max_message_mb=50, max_per_message=8, max_pixels=50_000_000,
                                            max_side=2048, max_per_prompt=4, allow_urls=False)
    for name, value in {"DEMO_IMAGE_MAX_MB": "1.5", "DEMO_IMAGE_MAX_MESSAGE_MB": "3", "DEMO_IMAGE_MAX_PER_MESSAGE": "2",
                        "DEMO_IMAGE_MAX_PIXELS": "1000", "DEMO_IMAGE_MAX_SIDE": "16",
                        "DEMO_MAX_IMAGES_PER_PROMPT": "1", "DEMO_IMAGE_URLS": "1"}.items():
        monkeypatch.setenv(name, value)
    assert ImageSettings.from_env() == ImageSettings(max_mb=1.5, max_message_mb=3, max_per_message=2, max_pixels=1000,
                                                     max_side=16, max_per_prompt=1, allow_urls=True)
    prepared = prepare_image(encode(Image.new("RGB", (30, 10)), "PNG"))  # settings=None reads the environment
    assert (prepared.width, prepared.height) == (16, 5)
    with pytest.raises(ImageError, match="at most 2 images"):
        check_message_images([prepared.data] * 3)


# ----- data URLs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"),
                                           ("GIF", "image/gif")])
def test_data_urls_round_trip_with_the_sniffed_type(fmt, mime):
    data = encode(Image.new("RGB", (4, 4), "red"), fmt)
    url = to_data_url(data)
    assert url.startswith(f"data:{mime};base64,")
    assert from_data_url(url, SMALL) == data
    assert to_data_url(data, "image/x-custom").startswith("data:image/x-custom;base64,")
    assert from_data_url("DATA:IMAGE/PNG;name=a.png;BASE64," + url.split(",", 1)[1], SMALL) == data


def test_sniff_mime_refuses_what_is_not_an_image():
    with pytest.raises(ImageError, match="not a PNG, JPEG, WebP or GIF"):
        sniff_mime(b"BM\x00\x00")
    with pytest.raises(ImageError):
        to_data_url(b"plain text")


@pytest.mark.parametrize(("url", "message"), [
    ("http://example.com/cat.png", "data URL"),
    ("https://example.com/cat.png", "data URL"),
    ("data:text/plain;base64,aGVsbG8=", "holds text/plain, not an image"),
    ("data:,hello", "holds text/plain, not an image"),
    ("data:image/png,%89PNG", "must be base64-encoded"),
    ("data:image/png;base64", "no comma"),
    ("data:image/png;base64,", "no data"),
    ("data:image/png;base64,iVBO@@@=", "not valid base64"),
    ("data:image/png;base64,iVBO\nRw0K", "not valid base64"),
    ("data:image/png;base64,iVBORw0", "not valid base64"),  # wrong padding
    ("data:image/png;base64," + "A" * 4 * 1024, "more than the 0.001 MB"),
])
def test_bad_data_urls_are_refused(url, message):
    with pytest.raises(ImageError, match=message):
        from_data_url(url, ImageSettings(max_mb=0.001))


def test_an_oversized_data_url_is_refused_without_decoding(monkeypatch):
    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded before the size check")

    monkeypatch.setattr(base64, "b64decode", no_decoding)
    with pytest.raises(ImageError, match="more than the 1 MB"):
        from_data_url("data:image/png;base64," + "A" * (2 * 2**20), SMALL)


# ----- whole messages --------------------------------------------------------------------------------------------

def test_check_message_images_counts_and_sizes():
    prepared = prepare_image(encode(Image.new("RGB", (8, 8)), "PNG"), "a.png", SMALL)
    check_message_images([prepared] * 3, SMALL)
    check_message_images([], SMALL)
    with pytest.raises(ImageError, match="at most 3 images and this one has 4"):
        check_message_images([prepared] * 4, SMALL)
    with pytest.raises(ImageError, match=r"3 MB together, more than the 2 MB one message may carry"):
        check_message_images([b"x" * 2**20] * 3, SMALL)


# ----- hostile bytes ---------------------------------------------------------------------------------------------

def _fuzz_seeds() -> list[bytes]:
    rng = random.Random(4)
    noise = Image.frombytes("RGB", (24, 24), rng.randbytes(24 * 24 * 3))
    rgba = noise.convert("RGBA")
    frames = [noise.convert("P"), Image.new("P", (24, 24), 3)]
    exif = Image.Exif()
    exif[0x0112] = 8
    return [
        encode(rgba, "PNG"),
        encode(noise.convert("P"), "PNG", transparency=0),
        encode(noise, "JPEG", exif=exif),
        encode(noise, "JPEG", progressive=True),
        encode(frames[0], "GIF", save_all=True, append_images=frames[1:], transparency=0),
        encode(rgba, "WEBP"),
        encode(noise, "WEBP", save_all=True, append_images=[noise.rotate(90)], lossless=True),
    ]


def _mutations(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        mutated = bytearray(data)
        kind = rng.randrange(4)
        if kind == 0:  # flip a few bits, often in the header where the sizes and chunk lengths are
            for _ in range(rng.randint(1, 8)):
                position = rng.randrange(min(len(mutated), 64)) if rng.random() < 0.5 else rng.randrange(len(mutated))
                mutated[position] ^= 1 << rng.randrange(8)
        elif kind == 1:  # cut short
            del mutated[rng.randrange(1, len(mutated)):]
        elif kind == 2:  # overwrite a run with random bytes
            start = rng.randrange(len(mutated))
            mutated[start:start + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
        else:  # large values in a likely length or size field
            start = rng.randrange(8, min(len(mutated), 40))
            mutated[start:start + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00"])
        out.append(bytes(mutated))
    return out


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data", "ignore:Truncated File Read")  # Pillow's notes, tolerated
def test_mutated_images_give_only_image_errors():
    rng = random.Random(20240611)
    outcomes = {"ok": 0, "refused": 0}
    for seed in _fuzz_seeds():
        for data in _mutations(seed, rng, 60):
            try:
                prepared = prepare_image(data, "fuzz", SMALL)
            except ImageError as exc:
                assert str(exc), "an ImageError must say what is wrong"
                outcomes["refused"] += 1
            else:
                assert prepared.mime in ("image/png", "image/jpeg") and 0 < prepared.width <= SMALL.max_side
                outcomes["ok"] += 1
    assert sum(outcomes.values()) == 7 * 60
    assert outcomes["ok"] and outcomes["refused"]  # the mutations reach both sides of the parser
