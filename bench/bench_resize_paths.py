"""How close each source's resize path and ours come to the original image (issue 30, item 5).

    nice -n 10 python bench/bench_resize_paths.py [--corpus synthetic|real] [--images 300] [--crops N]
        [--seed 0] [--json]

Corpus `synthetic` (the default): synthetic photo-like JPEGs (`images.photo_bytes`, `make-synthetic-imagenet --imagenet-like`'s
pictures: hard-edged shapes, texture at several scales and sensor grain over a smooth field, q75..95,
4:2:0), sizes from `imagenet_like_size` (ImageNet's spread: mostly 500x375 / 500x333 and portrait
forms, ~17 % with a longer side over 500 px; those over 2000 px are redrawn to keep the run short).

Corpus `real`: the 12 real colour photographs bundled in two PyPI wheels and matplotlib (`REAL_PHOTOS`:
scikit-image's astronaut, chelsea, coffee, ihc, motorcycle_left/right (lossless PNGs), hubble_deep_field,
retina, rocket (JPEGs); scikit-learn's china, flower; matplotlib's grace_hopper), read straight from
the wheels' zips (`pip download --no-deps scikit-image scikit-learn` into a user cache folder, once;
nothing is installed). Small and not ImageNet: 12 images, 451-1411 px, 11 over 500 px, many crops
each (`--crops` default 40). A PNG is encoded as JPEG q90 4:2:0 (Pillow's), which every path then
starts from, and the reference is the PNG itself (the scene before any JPEG loss); a JPEG is used as
it is, its full decode the reference.

Each crop box is drawn once in original-image pixels (train: `RandomResizedCrop` scale (0.08, 1),
ratio (3/4, 4/3); val: torchvision's Resize + CenterCrop, or FFCV's ratio crop) and every path
resamples that same box (scaled to its stored image's pixels where the stored image is smaller).
The reference is the original JPEG decoded at full size, the box resampled by Lanczos-3 in float
(Pillow's "F" mode, antialiased). Paths:

- `source`: torchvision's own transforms on the PIL image of the original (full decode):
  `resized_crop` (train) or `resize` + `center_crop` (val), antialiased, with the setting's filter
  (bilinear for torchvision; bicubic is timm's test filter and one half of its random train choice;
  timm's `RandomResizedCropAndInterpolation` and its eval transforms call the same functions);
- `ffcv-jpg` / `ffcv-raw`: FFCV 1.0's own code in the FFCV peer venv (`ffcv.fields.rgb_image`'s
  `resizer` to a longer side of 500 with cv2 INTER_AREA, `encode_jpeg` q90 or raw pixels, libffcv's
  `imdecode` and `resize_crop` (crop, then INTER_AREA); boxes rounded to whole stored pixels as FFCV's
  are); "not run" without that venv;
- `ours-500`: prepare-shards' stored bytes at its default (`process_image` with `ImagePolicy()`:
  longer side 500, LANCZOS, re-encoded q90), then the loader's crop (`decode._crop`: the turbo region
  decoder where built, with its 1/2, 1/4, 1/8 DCT scaling, else Pillow's draft path);
- `ours-none`: the same with `--resize none` (`ImagePolicy(resize="none")`: the original's DCT
  coefficients kept, restart markers added), then the same crop;
- `ours-none-full`: the same stored bytes and box with the loader's `dct_scaling="off"`
  (train-imagenet `--dct-scaling off`): the region decoded at full size, then resampled.

Per crop: PSNR (dB, peak 255) and the largest absolute error (0..255) against the reference, plus
PSNR against `source`'s output itself, and the paired gap (a path's PSNR minus source's on the same
crop) with its standard error; means over crops, for all images, those at most 500 px (where
`ours-500` stores the same coefficients as `ours-none`) and those over 500 px (where it resizes).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageChops, ImageStat
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

from imagenet_shards.pipeline.prepare.images import ImagePolicy, process_image
from imagenet_shards.pipeline.tools.synthetic.images import class_styles, imagenet_like_size, photo_bytes
from imagenet_shards.train.loader import decode as dec

PEER_PYTHON = Path.home() / ".cache" / "imagenet-shards-peers" / "ffcv" / "bin" / "python"
FFCV_MAX_RES = 500  # ffcv-imagenet's ResNet-50 set (README 'Training Details'); ResNet-18's 400 is not run
# the real corpus: (wheel's distribution, member) or ("matplotlib", path under mpl-data)
REAL_PHOTOS = tuple(("scikit_image", f"skimage/data/{n}.png") for n in (
    "astronaut", "chelsea", "coffee", "ihc", "motorcycle_left", "motorcycle_right")) + tuple(
    ("scikit_image", f"skimage/data/{n}.jpg") for n in ("hubble_deep_field", "retina", "rocket")) + (
    ("scikit_learn", "sklearn/datasets/images/china.jpg"), ("scikit_learn", "sklearn/datasets/images/flower.jpg"),
    ("matplotlib", "sample_data/grace_hopper.jpg"))
PNG_QUALITY = 90
# (name, kind, output px, filter, val resize or FFCV ratio)
SETTINGS = (
    ("train RRC 224, bilinear (torchvision)", "train", 224, "bilinear", None),
    ("train RRC 224, bicubic (timm's bicubic half)", "train", 224, "bicubic", None),
    ("train RRC 160, bilinear (FFCV / RSB res)", "train", 160, "bilinear", None),
    ("val 256 -> 224, bilinear (tv-rn50-v1)", "val", 224, "bilinear", 256),
    ("val 232 -> 224, bilinear (tv-rn50-v2)", "val", 224, "bilinear", 232),
    ("val 235 -> 224, bicubic (rsb-a3, crop 0.95)", "val", 224, "bicubic", 235),
    ("val ratio 224/256 -> 256 (ffcv)", "ratio", 256, "bilinear", 224 / 256),
)
_TV = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}

# Runs in the FFCV venv (its own numpy, cv2 and libffcv): JPEG files and jobs.npy in, an .npz out.
_PEER = r"""
import sys, io, numpy as np
from PIL import Image
from ffcv.fields.rgb_image import resizer, encode_jpeg
from ffcv.libffcv import imdecode, resize_crop
jobs = np.load(sys.argv[1] + "/jobs.npy")  # rows: image, crop, top, left, h, w, size
out = {}
for i in range(int(jobs[:, 0].max()) + 1):
    orig = np.asarray(Image.open(f"{sys.argv[1]}/{i}.jpg").convert("RGB"))
    small = resizer(orig, int(sys.argv[3]))
    h, w = small.shape[:2]
    jpg = encode_jpeg(small, 90)
    decoded = np.zeros((h, w, 3), np.uint8)
    imdecode(jpg, decoded, h, w, h, w, 0, 0, 1, 1, False, False)
    sy, sx = h / orig.shape[0], w / orig.shape[1]
    for _, k, top, left, bh, bw, size in jobs[jobs[:, 0] == i]:
        r0, c0 = int(round(top * sy)), int(round(left * sx))
        r1, c1 = max(r0 + 1, int(round((top + bh) * sy))), max(c0 + 1, int(round((left + bw) * sx)))
        for name, img in (("jpg", decoded), ("raw", np.ascontiguousarray(small))):
            dst = np.zeros((int(size), int(size), 3), np.uint8)
            resize_crop(img, r0, r1, c0, c1, dst)
            out[f"{name}_{i}_{int(k)}"] = dst
np.savez(sys.argv[2], **out)
"""


class CorpusError(RuntimeError):
    """The real corpus cannot be had (pip cannot fetch the wheels, a member is missing or not colour)."""


def corpus(n: int, seed: int) -> list[bytes]:
    """`n` photo-like JPEGs with ImageNet's size spread (longer side <= 2000 px)."""
    styles, out = class_styles(10, seed), []
    for i in range(n):
        rng = np.random.default_rng([seed, i, 30])
        w, h = imagenet_like_size(rng)
        while max(w, h) > 2000:
            w, h = imagenet_like_size(rng)
        out.append(photo_bytes(styles[i % 10], rng, w, h, int(rng.integers(75, 96)))[0])
    return out


def photo_cache() -> Path:
    """Where the wheels of the real corpus are kept: $XDG_CACHE_HOME (else ~/.cache)/imagenet-shards/photo-wheels."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imagenet-shards" / "photo-wheels"


def photo_wheels(cache: Path) -> dict[str, Path]:
    """{distribution: wheel} of scikit-image and scikit-learn in `cache`, fetched there with `pip
    download --no-deps` when absent; CorpusError in one line when pip cannot."""
    def found():
        return {d: sorted(cache.glob(f"{d}-*.whl"))[-1] for d in ("scikit_image", "scikit_learn")
                if list(cache.glob(f"{d}-*.whl"))}
    if len(found()) < 2:
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "scikit-image",
                               "scikit-learn", "-d", str(cache)], capture_output=True, text=True)
        if done.returncode != 0 or len(found()) < 2:
            why = (done.stderr.strip().splitlines() or ["no wheel saved"])[-1]
            raise CorpusError(f"cannot fetch the real-photo corpus: `pip download --no-deps scikit-image scikit-learn "
                              f"-d {cache}` failed ({why}); run it by hand where the package registry is reachable, "
                              f"or use --corpus synthetic")
    return found()


def _colour(img: Image.Image, name: str) -> Image.Image:
    """`img` as RGB; CorpusError unless its channels differ (a colour picture, not grey in RGB)."""
    rgb = img.convert("RGB")
    r, g, b = rgb.split()
    spread = sum(ImageStat.Stat(ImageChops.difference(x, y)).mean[0] for x, y in ((r, g), (g, b)))
    if img.mode not in ("RGB", "RGBA") or spread < 4:
        raise CorpusError(f"{name} is not a colour image (mode {img.mode}, mean channel difference {spread:.1f})")
    return rgb


def real_corpus(cache: Path) -> tuple[list[str], list[bytes], list[Image.Image], list[str]]:
    """(names, JPEG bytes, references, wheel file names) of `REAL_PHOTOS`: a PNG encoded as JPEG
    q`PNG_QUALITY` with the PNG as its reference, a JPEG as it is with its full decode."""
    import zipfile
    wheels = photo_wheels(cache)
    names, jpegs, refs = [], [], []
    for dist, member in REAL_PHOTOS:
        if dist == "matplotlib":
            import matplotlib
            path = Path(matplotlib.get_data_path()) / member
            if not path.is_file():
                raise CorpusError(f"{path} is missing: the matplotlib in this environment has no sample data")
            data = path.read_bytes()
        else:
            with zipfile.ZipFile(wheels[dist]) as z:
                if member not in z.namelist():
                    raise CorpusError(f"{wheels[dist].name} has no {member}")
                data = z.read(member)
        ref = _colour(Image.open(io.BytesIO(data)), member)
        if member.endswith(".png"):
            buf = io.BytesIO()
            ref.save(buf, "JPEG", quality=PNG_QUALITY)
            data = buf.getvalue()
        names.append(Path(member).stem)
        jpegs.append(data)
        refs.append(ref)
    return names, jpegs, refs, [w.name for w in wheels.values()]


def boxes(width: int, height: int, crops: int, rng: random.Random) -> list[tuple]:
    """(setting index, (top, left, h, w) in original pixels) for every setting."""
    jobs = []
    for s, (_, kind, size, _, arg) in enumerate(SETTINGS):
        if kind == "train":
            jobs += [(s, tuple(map(float, dec.random_resized_crop_params(width, height, (0.08, 1.0), (3 / 4, 4 / 3), rng))))
                     for _ in range(crops)]
        elif kind == "val":
            jobs.append((s, dec.center_crop_params(width, height, arg, size)))
        else:
            jobs.append((s, tuple(map(float, dec.center_crop_ratio_params(width, height, arg)))))
    return jobs


def reference(original: Image.Image, box: tuple, size: int) -> np.ndarray:
    """The box of the full-size original resampled to size x size by float Lanczos-3: HWC float64."""
    top, left, h, w = box
    planes = [np.asarray(band.convert("F").resize((size, size), Image.Resampling.LANCZOS,
                                                  box=(left, top, left + w, top + h)), dtype=np.float64)
              for band in original.split()]
    return np.stack(planes, axis=-1)


def source_path(original: Image.Image, setting: tuple, box: tuple) -> np.ndarray:
    """torchvision's transforms on the original's PIL image (what its ImageFolder recipe, and timm's, do)."""
    _, kind, size, filt, arg = setting
    mode = _TV[filt]
    if kind == "val":  # Resize(arg) on the whole image, then CenterCrop(size)
        return np.asarray(F.center_crop(F.resize(original, arg, interpolation=mode, antialias=True), [size, size]))
    top, left, h, w = (int(round(v)) for v in box)
    return np.asarray(F.resized_crop(original, top, left, h, w, [size, size], interpolation=mode, antialias=True))


def ours(stored: bytes, orig_size: tuple[int, int], setting: tuple, box: tuple, dct_scaling: str = "auto") -> np.ndarray:
    """The loader's crop of the same box (scaled to the stored image) from prepare-shards' stored bytes,
    with the loader's ``dct_scaling``."""
    _, _, size, filt, _ = setting
    (w, h), img = dec._open_size(stored, dec.AUTO_DECODER)  # the loader's own crop step, given our box
    sx, sy = w / orig_size[0], h / orig_size[1]
    top, left, bh, bw = box
    chw = dec._crop(stored, img, (top * sy, left * sx, bh * sy, bw * sx), size, None, False, filt, dct_scaling)
    return np.ascontiguousarray(chw.transpose(1, 2, 0))


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(PSNR dB, max abs error) of a uint8 HWC output against a float reference; PSNR at most 99 dB
    (an exact copy: a val box whose side is already the output's, so nothing is resampled)."""
    diff = out.astype(np.float64) - ref
    mse = float(np.mean(diff * diff))
    return (min(99.0, 10 * math.log10(255.0 ** 2 / mse)) if mse > 0 else 99.0), float(np.abs(diff).max())


def run_ffcv(jpegs: list[bytes], jobs: list[list[tuple]], tmp: Path) -> dict | None:
    """FFCV's outputs keyed "jpg_i_k" / "raw_i_k", or None when its venv is absent."""
    if not PEER_PYTHON.exists():
        return None
    dst = tmp / "ffcv_out.npz"
    for i, b in enumerate(jpegs):
        (tmp / f"{i}.jpg").write_bytes(b)
    np.save(tmp / "jobs.npy", np.array([(i, k, *box, SETTINGS[s][2]) for i, js in enumerate(jobs)
                                        for k, (s, box) in enumerate(js)], dtype=np.float64))
    subprocess.run([str(PEER_PYTHON), "-c", _PEER, str(tmp), str(dst), str(FFCV_MAX_RES)], check=True)
    with np.load(dst) as got:
        return {k: got[k] for k in got.files}


def _summary(v: list[tuple]) -> dict:
    """Means over crops of PSNR, max error and PSNR against source (None for source itself), and the
    paired gap to source's PSNR (this path's minus source's, per crop) with its standard error: the
    noise a gap is judged against."""
    gaps = np.array([r[3] for r in v])
    return {"psnr": float(np.mean([r[0] for r in v])), "max_err": float(np.mean([r[1] for r in v])),
            "psnr_vs_source": None if v[0][2] is None else float(np.mean([r[2] for r in v])),
            "gap_db": float(gaps.mean()), "gap_se_db": float(gaps.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0,
            "crops": len(v)}


def measure(n: int, crops: int, seed: int, real: bool = False, cache: Path | None = None) -> dict:
    """Per setting, image group (all, <=500, >500 px) and path: the `_summary` of its crops; `real`:
    the real corpus (`real_corpus`, `n` unused), else `n` synthetic images."""
    names, wheels = None, None
    if real:
        names, jpegs, refs, wheels = real_corpus(cache or photo_cache())
    else:
        jpegs = corpus(n, seed)
    rng = random.Random(seed)
    originals = [Image.open(io.BytesIO(b)).convert("RGB") for b in jpegs]
    refs = refs if real else originals
    jobs = [boxes(*img.size, crops, rng) for img in originals]
    with tempfile.TemporaryDirectory(prefix="bench-resize-") as tmp:
        ffcv = run_ffcv(jpegs, jobs, Path(tmp))
    rows: dict = {}
    for i, (data, original) in enumerate(zip(jpegs, originals)):
        large = max(original.size) > 500
        stored = {"ours-500": process_image(data, ImagePolicy()).data,
                  "ours-none": process_image(data, ImagePolicy(resize="none")).data}
        for k, (s, box) in enumerate(jobs[i]):
            setting = SETTINGS[s]
            ref = reference(refs[i], box, setting[2])
            src = source_path(original, setting, box)
            outs = {"source": src, **{p: ours(b, original.size, setting, box) for p, b in stored.items()},
                    "ours-none-full": ours(stored["ours-none"], original.size, setting, box, "off")}
            if ffcv is not None:
                outs.update({f"ffcv-{v}": ffcv[f"{v}_{i}_{k}"] for v in ("jpg", "raw")})
            src_psnr = errors(src, ref)[0]
            for path, out in outs.items():
                psnr, worst = errors(out, ref)
                vs_src = errors(out, src.astype(np.float64))[0] if path != "source" else None
                for group in ("all", ">500" if large else "<=500"):
                    rows.setdefault(setting[0], {}).setdefault(group, {}).setdefault(path, []).append(
                        (psnr, worst, vs_src, psnr - src_psnr))
    table = {name: {group: {path: _summary(v) for path, v in paths.items()} for group, paths in groups.items()}
             for name, groups in rows.items()}
    return {"corpus": "real" if real else "synthetic", "names": names, "wheels": wheels, "images": len(jpegs),
            "over_500": sum(max(o.size) > 500 for o in originals), "crops_per_train_setting": crops, "seed": seed, "ffcv": "run" if ffcv is not None else "not run (no FFCV peer venv)", "table": table}


def print_table(result: dict) -> None:
    kind = "real photos (" + ", ".join(result["names"]) + ")" if result["names"] else "photo-like images"
    print(f"{result['images']} {kind} ({result['over_500']} over 500 px), seed {result['seed']}; FFCV: {result['ffcv']}")
    print("PSNR dB against the float Lanczos reference of the original / mean max abs error / PSNR against source; "
          "gap: PSNR minus source's, ± its standard error")
    for name, groups in result["table"].items():
        for group, paths in groups.items():
            cells = [f"{p} {v['psnr']:.2f}/{v['max_err']:.0f}" + (f"/{v['psnr_vs_source']:.1f} gap {v['gap_db']:+.2f}"
                                                                 f"±{v['gap_se_db']:.2f}" if v["psnr_vs_source"] is not None
                                                                 else "") for p, v in paths.items()]
            print(f"{name:46s} {group:5s} n={next(iter(paths.values()))['crops']:4d}  " + "  ".join(cells))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", choices=("synthetic", "real"), default="synthetic",
                    help="synthetic photo-like JPEGs (default) or the 12 real photos of REAL_PHOTOS")
    ap.add_argument("--images", type=int, default=300, help="synthetic corpus: how many images (default 300)")
    ap.add_argument("--crops", type=int, default=None,
                    help="random crops per image per train setting (default 2 synthetic, 40 real)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    args = ap.parse_args(argv)
    crops = args.crops if args.crops is not None else (40 if args.corpus == "real" else 2)
    if args.images < 1 or crops < 1:
        ap.error("--images and --crops must be at least 1")
    t0 = time.perf_counter()
    try:
        result = measure(args.images, crops, args.seed, real=args.corpus == "real")
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result["load_avg"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
        print(f"{result['wall_s']} s, load average {result['load_avg'][0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
