"""What an image file is, from its bytes alone: the format by signature, the JPEG header up to the
first scan (to decide pass-through), and whether the data is complete (end markers).

Hand-written, not PIL: PIL identifies formats leniently (some plugins accept almost any bytes) and
does not expose the JPEG details pass-through depends on (SOF type, component IDs, JFIF/Adobe
colour transform) or whether a JPEG's scan is followed by its end-of-image marker, which libjpeg
does not require (it decodes a cut file padded with grey). Used by `images.process_image`.
"""

from __future__ import annotations

from dataclasses import dataclass

JPEG_FAMILY = ("JPEG", "MPO")  # MPO = JPEG with extra frames; decoders read the first one


def sniff_format(data: bytes) -> str | None:
    """Format from magic bytes, for the formats we expect; used to tell a damaged image from junk."""
    if data[:3] == b"\xff\xd8\xff":
        return "JPEG"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    # "BM" alone is too weak (text starts with it); require a known DIB header size.
    if data[:2] == b"BM" and int.from_bytes(data[14:18], "little") in (12, 40, 52, 56, 64, 108, 124):
        return "BMP"
    return None


def image_format_name(data: bytes) -> str | None:
    """The format a stored image is counted as: its signature's (``sniff_format``: a JPEG is "JPEG"
    whatever else Pillow might call it), else the name Pillow gives it, else None (nothing reads it).
    Adopted sets count their images by this name and audit-shards recounts them the same way."""
    fmt = sniff_format(data)
    if fmt is not None or not data:
        return fmt
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.format
    except Exception:  # noqa: BLE001 - nothing reads it: no format
        return None


def failure_reason(fmt: str | None, data: bytes, header: JpegHeader | None, message: str) -> str:
    """"truncated" when the decoder says so or the data lacks the format's end marker, else "corrupt"."""
    if "truncated" in message.lower():
        return "truncated"
    if fmt in JPEG_FAMILY:
        return "corrupt" if jpeg_has_end(data, header) else "truncated"
    if fmt == "PNG":
        return "corrupt" if data.rfind(b"IEND") != -1 else "truncated"
    if fmt == "GIF":
        return "corrupt" if data.rstrip(b"\x00").endswith(b";") else "truncated"
    return "corrupt"


def jpeg_has_end(data: bytes, header: JpegHeader | None) -> bool:
    """True if an EOI marker follows the first scan. Entropy-coded data cannot contain FF D9
    (FF is always stuffed), so this finds the real end, not one inside an EXIF thumbnail."""
    start = header.sos_offset if header is not None else 2
    return data.rfind(b"\xff\xd9", start) != -1


@dataclass(frozen=True)
class JpegHeader:
    """A JPEG's frame and colour facts, read from its markers up to the first scan (SOS)."""

    sof: int  # the SOFn marker's second byte: 0xC0 baseline, 0xC1 extended, 0xC2 progressive, ...
    precision: int
    width: int
    height: int
    component_ids: tuple[int, ...]
    jfif: bool
    adobe_transform: int | None
    sos_offset: int

    def is_plain(self) -> bool:
        """Baseline/extended/progressive Huffman, 8-bit, 3 components in YCbCr: safe to pass through."""
        return (self.sof in (0xC0, 0xC1, 0xC2) and self.precision == 8
                and len(self.component_ids) == 3 and self._color_space() == "YCbCr")

    def _color_space(self) -> str:
        # libjpeg's rule for 3-component files (jdapimin.c default_decompress_parms)
        if self.jfif:
            return "YCbCr"
        if self.adobe_transform is not None:
            return "RGB" if self.adobe_transform == 0 else "YCbCr"
        return "RGB" if self.component_ids == (0x52, 0x47, 0x42) else "YCbCr"


def jpeg_header(data: bytes) -> JpegHeader:
    """Parse JPEG markers from SOI to the first SOS. ValueError says what is wrong or missing."""
    cut_short = "JPEG data ends inside the header (no scan data)"
    pos, n = 2, len(data)
    frame = None  # (SOF marker, SOF segment)
    jfif, adobe = False, None
    while True:
        if pos < n and data[pos] != 0xFF:
            raise ValueError(f"JPEG header is damaged: no marker at byte {pos}")
        while pos < n and data[pos] == 0xFF:  # marker prefix and fill bytes
            pos += 1
        if pos + 3 > n:
            raise ValueError(cut_short)
        marker = data[pos]
        pos += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # standalone markers carry no length
            continue
        if marker == 0xD9:
            raise ValueError("JPEG ends (EOI) before any scan data")
        length = int.from_bytes(data[pos:pos + 2], "big")
        if length < 2:
            raise ValueError(f"JPEG header is damaged: bad segment length at byte {pos}")
        segment = data[pos + 2:pos + length]
        if len(segment) < length - 2:
            raise ValueError(cut_short)
        if marker == 0xDA:
            break
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and frame is None:
            frame = marker, segment
        elif marker == 0xE0 and segment.startswith(b"JFIF\x00"):
            jfif = True
        elif marker == 0xEE and segment.startswith(b"Adobe") and len(segment) >= 12:
            adobe = segment[11]
        pos += length
    if frame is None:
        raise ValueError("JPEG header is damaged: scan data before any frame header (SOF)")
    sof, seg = frame
    if len(seg) < 6 or len(seg) < 6 + 3 * seg[5]:
        raise ValueError("JPEG header is damaged: short frame header (SOF)")
    if seg[0] != 8:
        raise ValueError(f"{seg[0]}-bit JPEG samples are not supported (8-bit only)")
    ids = tuple(seg[6 + 3 * i] for i in range(seg[5]))
    return JpegHeader(sof, seg[0], int.from_bytes(seg[3:5], "big"), int.from_bytes(seg[1:3], "big"),
                       ids, jfif, adobe, pos - 2)
