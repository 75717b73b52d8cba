"""inspect-shards: look at a shard set with your own eyes.

- contact sheet: a grid of images, each captioned with the label a trainer gets (its .cls), that
  label's WNID and class name from the manifest's class table, and the key: a person sees at a
  glance whether labels and images agree (a caption turns red where the json disagrees with .cls);
- stats: per-class counts of each split (from the manifest) and the distribution of stored image
  sizes (from the samples' json, read from a spread of shards);
- one sample by key: its json and where it lives, and optionally its three files.
Pillow only. Reads go through imagenet_shards.pipeline.storage; the manifest is read by
imagenet_shards.pipeline.format.manifest and the shards by the strict mode of the one tar reader,
imagenet_shards.pipeline.format.tar.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
from dataclasses import dataclass, field

from PIL import Image, ImageDraw, ImageFont

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import OneLineParser
from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.format.manifest import ManifestError, read_manifest, shard_url
from imagenet_shards.pipeline.format.tar import HashingReader, TarFormatError, iter_tar
from imagenet_shards.pipeline.interrupts import run_cli

TILE = 160  # image area of one contact-sheet tile, pixels
LINE = 13  # caption line height
CAPTION_LINES = 3
PAD = 4
BG, FG, DIM, BAD = (255, 255, 255), (0, 0, 0), (110, 110, 110), (200, 0, 0)


class InspectError(Exception):
    """inspect-shards cannot do what was asked; the message is one line."""


@dataclass
class Sample:
    key: str
    shard: str  # url relative to DATA
    files: dict[str, bytes] = field(default_factory=dict)  # extension -> bytes (skipped members absent)


@dataclass(frozen=True)
class Tile:
    """What one contact-sheet tile shows; `box` is (left, top, right, bottom) of the whole tile."""

    key: str
    shard: str
    label: int | None  # from .cls: what a trainer sees
    wnid: str  # classes[label].wnid
    name: str
    json_wnid: str | None
    caption: tuple[str, ...]
    box: tuple[int, int, int, int]


def iter_samples(data: str, urls: list[str], want=None):
    """Samples of the shards at `urls` (relative to DATA), in order. `want(key, ext, sample_so_far)` may
    decline a member's bytes (they are skipped, not read, where the file can seek)."""
    for url in urls:
        with storage.open_url(shard_url(data, url), "rb") as f:
            current = None

            def take(key, ext):
                so_far = current if current is not None and current.key == key else Sample(key, url)
                return want is None or want(key, ext, so_far)

            try:
                for m in iter_tar(HashingReader(f, algorithms=(), block=1 << 16), want=take, where=url):
                    if current is None or current.key != m.key:
                        if current is not None:
                            yield current
                        current = Sample(m.key, url)
                    if m.data is not None:
                        current.files[m.ext] = m.data
            except TarFormatError as e:
                raise InspectError(str(e)) from None
            if current is not None:
                yield current


def parse_classes(spec: str | None, classes: list[dict]) -> set[int] | None:
    """'n01440764,3' -> {0, 3}: WNIDs or label indices; None means every class."""
    if not spec:
        return None
    by_wnid = {c["wnid"]: c["index"] for c in classes}
    out = set()
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        if item in by_wnid:
            out.add(by_wnid[item])
        elif item.isdigit() and int(item) < len(classes):
            out.add(int(item))
        else:
            raise InspectError(f"--classes: {item!r} is neither a WNID nor a label in this shard set's class table")
    return out


def _label(data: bytes | None) -> int | None:
    try:
        return int(data)
    except (TypeError, ValueError):
        return None


def pick_samples(data: str, manifest: dict, *, split: str, n: int, labels: set[int] | None = None) -> list[Sample]:
    """The first n samples of `split` in shard order (shards are already shuffled) whose .cls is in `labels`."""
    if split not in manifest["splits"]:
        raise InspectError(f"the manifest has no split {split} (it has {', '.join(sorted(manifest['splits']))})")
    urls = [sh["url"] for sh in manifest["splits"][split]["shards"]]

    def want(key, ext, so_far):  # .cls comes before .jpg in a shard: skip the images of other classes
        return labels is None or ext == "cls" or _label(so_far.files.get("cls")) in labels

    out = []
    for s in iter_samples(data, urls, want):
        if labels is None or _label(s.files.get("cls")) in labels:
            out.append(s)
            if len(out) == n:
                break
    return out


def _fit(draw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def tile_image(s: Sample, tile: int) -> Image.Image:
    """A sample's picture within tile x tile: a JPEG decoded at reduced scale, a pixel sample's planes
    through the form's float reference (pixels.to_rgb) at the json's width x height. Raises if neither reads."""
    if pixels.EXT in s.files:
        meta = json.loads(s.files["json"])
        im = Image.fromarray(pixels.to_rgb(s.files[pixels.EXT], int(meta["width"]), int(meta["height"])))
    else:
        with Image.open(io.BytesIO(s.files["jpg"])) as jpeg:
            jpeg.draft("RGB", (tile, tile))  # JPEG: decode at reduced scale, much faster
            im = jpeg.convert("RGB")
    im.thumbnail((tile, tile))
    return im


def draw_contact_sheet(samples: list[Sample], classes: list[dict], *, cols: int | None = None,
                       tile: int = TILE) -> tuple[Image.Image, list[Tile]]:
    """Draw samples in a grid, row by row; returns the image and, per tile in order, what it shows."""
    font = ImageFont.load_default()
    cols = cols or max(1, math.ceil(math.sqrt(len(samples))))
    rows = max(1, math.ceil(len(samples) / cols))
    tw, th = tile + 2 * PAD, tile + 2 * PAD + CAPTION_LINES * LINE
    sheet = Image.new("RGB", (cols * tw, rows * th), BG)
    draw = ImageDraw.Draw(sheet)
    tiles = []
    for i, s in enumerate(samples):
        x0, y0 = (i % cols) * tw, (i // cols) * th
        try:
            im = tile_image(s, tile)
            sheet.paste(im, (x0 + PAD + (tile - im.width) // 2, y0 + PAD + (tile - im.height) // 2))
        except Exception:  # noqa: BLE001 - an undecodable image gets a cross; audit --deep says why
            draw.line((x0 + PAD, y0 + PAD, x0 + PAD + tile, y0 + PAD + tile), fill=BAD, width=2)
            draw.line((x0 + PAD, y0 + PAD + tile, x0 + PAD + tile, y0 + PAD), fill=BAD, width=2)
        label = _label(s.files.get("cls"))
        c = classes[label] if label is not None and 0 <= label < len(classes) else None
        try:
            json_wnid = json.loads(s.files["json"])["wnid"]
        except (KeyError, ValueError, TypeError):
            json_wnid = None
        if label == -1 and json_wnid is None:  # the test split: unlabeled by design
            c, wnid, name, agree = None, None, "unlabeled (test)", True
        else:
            wnid, name = (c["wnid"], c["name"].split(",")[0]) if c else ("?", "label not in class table")
            agree = c is not None and json_wnid == wnid
        caption = (f"{label} {wnid or '-'}" + ("" if agree else f" json:{json_wnid}"), name, s.key)
        for j, (text, color) in enumerate(zip(caption, (FG if agree else BAD, FG if agree else BAD, DIM))):
            draw.text((x0 + PAD, y0 + 2 * PAD + tile + j * LINE - 2), _fit(draw, text, font, tile), fill=color,
                      font=font)
        tiles.append(Tile(s.key, s.shard, label, wnid, name, json_wnid, caption, (x0, y0, x0 + tw, y0 + th)))
    return sheet, tiles


def sample_sizes(data: str, manifest: dict, *, max_shards: int = 16) -> tuple[list[tuple[int, int]], int, int]:
    """Stored (width, height) of every sample in up to max_shards shards spread over all splits (json only)."""
    urls = [sh["url"] for s in manifest["splits"].values() for sh in s["shards"]]
    step = max(1, math.ceil(len(urls) / max_shards)) if max_shards else 1
    chosen = urls[::step][:max_shards] if max_shards else urls
    sizes = []
    for s in iter_samples(data, chosen, lambda key, ext, so_far: ext == "json"):
        try:
            meta = json.loads(s.files["json"])
            sizes.append((int(meta["width"]), int(meta["height"])))
        except (KeyError, ValueError, TypeError):
            pass
    return sizes, len(chosen), len(urls)


def _axes(draw, box, font, title, xlabel, ylabel, xmax, ymax):
    left, top, right, bottom = box
    draw.text((left, top - 28), title, fill=FG, font=font)
    draw.line((left, bottom, right, bottom), fill=FG)
    draw.line((left, top, left, bottom), fill=FG)
    draw.text((left - 6 - draw.textlength(str(ymax), font=font), top - 5), str(ymax), fill=FG, font=font)
    draw.text((left - 12, bottom - 5), "0", fill=FG, font=font)
    draw.text((right - draw.textlength(str(xmax), font=font), bottom + 4), str(xmax), fill=FG, font=font)
    draw.text(((left + right) // 2 - 30, bottom + 4), xlabel, fill=DIM, font=font)
    draw.text((left, top - 14), ylabel, fill=DIM, font=font)


def draw_stats(manifest: dict, sizes: list[tuple[int, int]], note: str = "") -> tuple[Image.Image, dict]:
    """Per-class count bars for each split and a scatter of stored image sizes; returns (image, the numbers drawn)."""
    font = ImageFont.load_default()
    wnids = [c["wnid"] for c in manifest["classes"]]
    splits = sorted(manifest["splits"])
    W, panel, margin = 900, 220, 60
    img = Image.new("RGB", (W, margin + (len(splits) + 1) * (panel + margin) + 2 * margin), BG)
    draw = ImageDraw.Draw(img)
    drawn = {"class_counts": {}, "sizes": len(sizes)}
    top = margin
    for split in splits:
        counts = [manifest["splits"][split]["class_counts"].get(w, 0) for w in wnids]
        drawn["class_counts"][split] = counts
        ymax = max(counts, default=0) or 1
        box = (margin, top + 30, W - margin // 2, top + panel)
        srt = sorted(counts)
        _axes(draw, box, font, f"{split}: images per class  ({len(wnids)} classes, min {srt[0] if srt else 0}, "
                               f"median {srt[len(srt) // 2] if srt else 0}, max {srt[-1] if srt else 0}, "
                               f"total {sum(counts)})", "label", "count", len(wnids) - 1, ymax)
        bw = (box[2] - box[0]) / max(1, len(counts))
        for i, c in enumerate(counts):
            x = box[0] + i * bw
            h = (box[3] - box[1]) * c / ymax
            draw.rectangle((x, box[3] - h, x + (bw * 0.8 if bw >= 4 else max(bw - 1, 0.5)), box[3]),
                           fill=(60, 110, 180))
        top += panel + margin
    xmax = max((w for w, _ in sizes), default=1)
    ymax = max((h for _, h in sizes), default=1)
    side = panel + margin
    box = (margin, top + 30, margin + side, top + 30 + side)
    _axes(draw, box, font, f"stored image sizes: {len(sizes)} samples {note}", "width", "height", xmax, ymax)
    for w, h in sizes:
        x = box[0] + (box[2] - box[0]) * w / xmax
        y = box[3] - (box[3] - box[1]) * h / ymax
        draw.ellipse((x - 1.5, y - 1.5, x + 1.5, y + 1.5), fill=(200, 80, 40))
    if sizes:
        longer = sorted(max(s) for s in sizes)
        shorter = sorted(min(s) for s in sizes)
        lines = [f"longer side: min {longer[0]}, median {longer[len(longer) // 2]}, max {longer[-1]}",
                 f"shorter side: min {shorter[0]}, median {shorter[len(shorter) // 2]}, max {shorter[-1]}"]
        for j, text in enumerate(lines):
            draw.text((box[2] + 40, box[1] + 20 + j * LINE * 2), text, fill=FG, font=font)
    return img, drawn


def find_sample(data: str, manifest: dict, key: str, splits: list[str] | None = None) -> Sample | None:
    """The sample with `key`, scanning shard headers (members of other keys are skipped, not read)."""
    names = splits or sorted(manifest["splits"], key=lambda s: (s != "val") if key.startswith("ILSVRC2012_val")
                             else (s != "train"))
    urls = [sh["url"] for s in names for sh in manifest["splits"][s]["shards"]]
    for s in iter_samples(data, urls, lambda k, ext, so_far: k == key):
        if s.key == key:
            return s
    return None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="inspect-shards",
        description="Look at a shard set: a captioned contact sheet (default), --stats, or one sample by --key.")
    p.add_argument("data", metavar="DATA", help="directory (or URL) holding manifest.json")
    p.add_argument("--split", default=None, help="split for the contact sheet (default val) or to search for --key")
    p.add_argument("--n", type=int, default=64, help="contact sheet: number of images (default 64)")
    p.add_argument("--classes", default=None,
                   help="contact sheet: only these classes (WNIDs or labels, comma-separated)")
    p.add_argument("--cols", type=int, default=None, help="contact sheet: columns (default: a square grid)")
    p.add_argument("--stats", action="store_true", help="class-count histograms and the image size distribution")
    p.add_argument("--max-shards", type=int, default=16,
                   help="--stats: read image sizes from at most this many shards, spread out (0: all)")
    p.add_argument("--key", default=None, help="show one sample's json and where it lives")
    p.add_argument("--extract", metavar="DIR", default=None,
                   help="with --key: write KEY.cls, KEY.jpg, KEY.json in this local folder")
    p.add_argument("--out", metavar="PNG", default=None,
                   help="local file to write the contact sheet or the stats to")
    storage.add_storage_option(p)
    return p


def local_arg(flag: str, value: str | None) -> str | None:
    """The local path an argument that only writes locally names (a plain path or file://); a remote URL
    is refused with InspectError, before anything is created."""
    if value is None:
        return None
    path = storage.local_path(value)
    if path is None:
        raise InspectError(f"{flag} takes a local path, not a URL ({storage.redact(value)}): write here, then copy")
    return path


def _run(args) -> int:
    args.extract, args.out = local_arg("--extract", args.extract), local_arg("--out", args.out)
    manifest = read_manifest(args.data)
    if args.key:
        s = find_sample(args.data, manifest, args.key, [args.split] if args.split else None)
        if s is None:
            print(f"inspect-shards: no sample with key {args.key} in {storage.redact(args.data)}", file=sys.stderr)
            return 1
        print(f"{s.key} in {s.shard}: " + ", ".join(f".{e} {len(b)} bytes" for e, b in sorted(s.files.items())))
        try:
            print(json.dumps(json.loads(s.files["json"]), indent=1, sort_keys=True))
        except (KeyError, ValueError):
            print("(no readable json)")
        if args.extract:
            os.makedirs(args.extract, exist_ok=True)
            for ext, b in sorted(s.files.items()):
                with open(os.path.join(args.extract, f"{s.key}.{ext}"), "wb") as f:
                    f.write(b)
            print(f"extracted {len(s.files)} files to {args.extract}")
        return 0
    if not args.out:
        raise InspectError("--out PNG is required for the contact sheet and --stats")
    if args.stats:
        sizes, read, total = sample_sizes(args.data, manifest, max_shards=args.max_shards)
        img, _ = draw_stats(manifest, sizes, f"from {read} of {total} shards")
    else:
        split = args.split or "val"
        if args.n < 1:
            raise InspectError("--n must be at least 1")
        picked = pick_samples(args.data, manifest, split=split, n=args.n,
                              labels=parse_classes(args.classes, manifest["classes"]))
        if not picked:
            raise InspectError(f"no samples of {split}" + (f" in classes {args.classes}" if args.classes else ""))
        img, tiles = draw_contact_sheet(picked, manifest["classes"], cols=args.cols)
        bad = sum(1 for t in tiles if t.json_wnid != t.wnid)
        print(f"{len(tiles)} {split} samples" + (f"; {bad} captions in red: .cls and json disagree" if bad else ""))
    img.save(args.out, format="PNG")
    print(f"wrote {args.out} ({img.width}x{img.height})")
    return 0


def main(argv=None) -> int:
    """Ctrl-C or SIGTERM: one line and exit 130/143, no traceback."""
    return run_cli(lambda: _main(argv), message="inspect-shards: interrupted")


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        storage.apply_storage_options(args.data, args.storage_option)
        return _run(args)
    except (InspectError, ManifestError, OSError) as e:
        print(f"inspect-shards: error: {storage.redact(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
