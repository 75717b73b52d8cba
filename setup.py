"""Only the optional C extensions live here; everything else is in pyproject.toml.

Both link the system libjpeg-turbo, the one pillow-simd is built against (headers: ``apt-get
install libjpeg-dev``), and both are optional: if one cannot be built the install still succeeds.
- ``imagenet_shards.train.loader._jpegcrop``: the ``turbo`` decoder (docs/loader.md); without it
  ``decoder="auto"`` uses Pillow. Its C files: ``_jpegcrop.c`` (the Python functions),
  ``jpegcrop_entry.c`` (entering at restart markers), ``jpegcrop_region.c`` (region decoding),
  ``jpegcrop_resample.c`` (the resampler into the batch slot).
Both share ``pipeline/format/jpeg_warnings.h``: which libjpeg warnings mean a damaged JPEG.
- ``imagenet_shards.pipeline.prepare._jpegtran``: prepare-shards' lossless rewrite of pass-through
  JPEGs with restart markers on a grid of ~32 px cells (docs/format.md); without it they pass through byte for
  byte, and prepare-shards says so.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("imagenet_shards.train.loader._jpegcrop",
              ["train/loader/_jpegcrop.c", "train/loader/jpegcrop_entry.c", "train/loader/jpegcrop_region.c",
               "train/loader/jpegcrop_resample.c"], include_dirs=["pipeline/format"], libraries=["jpeg"], optional=True),
    Extension("imagenet_shards.pipeline.prepare._jpegtran", ["pipeline/prepare/_jpegtran.c"], include_dirs=["pipeline/format"],
              libraries=["jpeg"], optional=True),
])
