"""Only the optional C extensions live here; everything else is in pyproject.toml.

Their sources are one folder, ``pipeline/native/`` (its ``modules.py`` says which files make which
module: ``_NAME.c`` and every ``NAME_*.c``; the headers are shared). Both link the system
libjpeg-turbo, the one pillow-simd is built against (headers: ``apt-get install libjpeg-dev``), and
both are optional: if one cannot be built the install still succeeds.
- ``imagenet_shards.train.loader._jpegcrop``: the ``turbo`` decoder (docs/loader.md); without it
  ``decoder="auto"`` uses Pillow. Its C files: ``_jpegcrop.c`` (the Python functions),
  ``jpegcrop_entry.c`` (entering at restart markers), ``jpegcrop_region.c`` (region decoding),
  ``jpegcrop_resample.c`` (the resampler into the batch slot).
- ``imagenet_shards.pipeline.prepare._jpegtran``: prepare-shards' lossless rewrite of pass-through
  JPEGs with restart markers on a grid of ~32 px cells (docs/format.md); without it they pass through byte for
  byte, and prepare-shards says so. Also prepare-shards derive's pixel encoder (``jpegtran_yuv.c``); without it
  derive encodes with numpy (the same bytes, slower).
Both share ``jpeg_errors.h``: the one libjpeg error manager, and which warnings mean a damaged JPEG.
"""

import runpy

from setuptools import Extension, setup

NATIVE = "pipeline/native"
modules = runpy.run_path(f"{NATIVE}/modules.py", run_name="modules")

setup(ext_modules=[Extension(name, sources, include_dirs=[NATIVE], libraries=["jpeg"], optional=True)
                   for name, sources in modules["extensions"]()])
