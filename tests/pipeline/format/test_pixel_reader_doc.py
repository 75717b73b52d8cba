"""docs/format.md's numpy reader of the pixel form, run as printed over a real pixel shard read with plain
webdataset: it gives exactly the planes' float reference (pixels.to_rgb), so the snippet cannot rot."""

from __future__ import annotations

import json
import re

import numpy as np

from imagenet_shards.pipeline.format import pixels
from tests.fixtures.docs import REPO


def doc_reader():
    """`yuv420_to_rgb` as docs/format.md's "Pixel form" section prints it."""
    text = (REPO / "docs" / "format.md").read_text()
    section = text[text.index("## Pixel form"):]
    body = re.search(r"^```python\n(.*?)^```", section, re.S | re.M).group(1)
    assert "def yuv420_to_rgb" in body and len(body.strip().splitlines()) <= 16
    scope: dict = {}
    exec(compile(body, "docs/format.md", "exec"), scope)  # noqa: S102 - the doc's own example
    return scope["yuv420_to_rgb"]


def test_the_documented_numpy_reader_equals_the_reference(pixel_shards):
    import webdataset as wds

    reader = doc_reader()
    m = json.loads((pixel_shards / "manifest.json").read_text())
    entries = [sh for s in m["splits"].values() for sh in s["shards"]][:2]
    urls = [str(pixel_shards / sh["url"]) for sh in entries]
    seen = 0
    for sample in wds.WebDataset(urls, shardshuffle=False):
        meta = json.loads(sample["json"])
        rgb = reader(sample)
        assert rgb.shape == (meta["height"], meta["width"], 3) and rgb.dtype == np.uint8
        assert np.array_equal(rgb, pixels.to_rgb(sample["yuv420"], meta["width"], meta["height"]))
        seen += 1
    assert seen == sum(sh["num_samples"] for sh in entries) > 0
