"""imagenet-shards-doctor tells the truth about the imaging stack in this interpreter."""

import json
from importlib import metadata

import PIL
from PIL import features

from imagenet_shards.pipeline.tools.doctor import main


def test_doctor_json_matches_the_imported_pil(capsys):
    assert main(["--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["pil_version"] == PIL.__version__
    assert info["libjpeg_turbo"] == bool(features.check_feature("libjpeg_turbo"))
    try:
        metadata.distribution("pillow-simd")
        simd_installed = True
    except metadata.PackageNotFoundError:
        simd_installed = False
    # pillow-simd versions carry a ".postN" suffix; a leftover dist-info alone must not count
    assert info["pillow_simd"] == (simd_installed and ".post" in PIL.__version__)


def test_doctor_brief_is_one_line_naming_the_path(capsys):
    assert main(["--brief"]) == 0
    out = capsys.readouterr().out.strip()
    assert "\n" not in out and ("fast path" in out or "SLOW PATH" in out)


def test_doctor_says_which_entropy_decoder_is_active(capsys, monkeypatch):
    """The turbo crop decoder's entropy path, as the extension reports it, and a bad
    IMAGENET_SHARDS_ENTROPY refused (the extension reads it once: its answer is stubbed here)."""
    import pytest

    from imagenet_shards.pipeline.tools import doctor

    assert main(["--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    if not info["turbo_crop_decoder"]:
        pytest.skip("the turbo crop decoder is not built")
    from imagenet_shards.train.loader import _jpegcrop

    assert (info["entropy_decoder"], info["entropy_decoder_reason"]) == _jpegcrop.entropy_path()[:2]
    assert main(["--brief"]) == 0
    assert f"entropy decoder {info['entropy_decoder']}," in capsys.readouterr().out
    monkeypatch.setattr(doctor, "_entropy_path",
                        lambda: ("libjpeg", "error: IMAGENET_SHARDS_ENTROPY=x is neither own nor libjpeg"))
    assert main(["--brief"]) == 2
    assert capsys.readouterr().err.startswith("error: IMAGENET_SHARDS_ENTROPY=x")
