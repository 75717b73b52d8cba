"""Only the optional C extension lives here; everything else is in pyproject.toml.

``imagenet_shards.train.loader._jpegcrop`` (the ``turbo`` decoder, docs/loader.md) links the system libjpeg-turbo, the
one pillow-simd is built against (headers: ``apt-get install libjpeg-dev``). It is optional: if it
cannot be built the install still succeeds and ``decoder="auto"`` uses Pillow.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("imagenet_shards.train.loader._jpegcrop", ["train/loader/_jpegcrop.c"], libraries=["jpeg"],
                             optional=True)])
