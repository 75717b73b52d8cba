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


# doctor in a fresh interpreter where the named extensions cannot be imported (an import hook refuses
# them, as an install whose optional build failed would): argv[1] the blocked names, the rest doctor's
BLOCKING = """
import sys
BLOCKED = set(filter(None, sys.argv[1].split(",")))
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.rsplit(".", 1)[-1] in BLOCKED:
            raise ImportError(f"blocked by the test: {name}")
        return None
sys.meta_path.insert(0, Refuse())
from imagenet_shards.pipeline.tools.doctor import main
sys.exit(main(sys.argv[2:]))
"""


def _doctor(blocked: str, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", BLOCKING, blocked, *args], capture_output=True, text=True,
                          timeout=120)


def test_doctor_names_each_missing_extension_with_what_it_costs_and_the_fix():
    done = _doctor("_jpegcrop", "--extensions")
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, (done.stdout, done.stderr)
    assert lines[0].startswith("_jpegcrop not built: the turbo crop decoder"), lines
    assert "decodes with Pillow" in lines[0] and "blocked by the test: imagenet_shards.train.loader._jpegcrop" in lines[0]
    assert "apt-get install -y gcc libjpeg-dev" in lines[0] and lines[0].endswith("then run make setup")

    done = _doctor("_jpegcrop,_jpegtran", "--extensions")
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 1 and [line.split(" ", 1)[0] for line in lines] == ["_jpegcrop", "_jpegtran"], lines
    assert "without restart markers" in lines[1] and "make setup" in lines[1]

    done = _doctor("_jpegcrop,_jpegtran", "--brief")
    assert done.returncode == 0 and len(done.stdout.strip().splitlines()) == 1, done.stdout
    assert "turbo crop decoder not built" in done.stdout and "restart-marker rewrite not built" in done.stdout
    assert "SLOW PATH" in done.stdout and "build _jpegcrop" in done.stdout and "build _jpegtran" in done.stdout

    done = _doctor("_jpegtran")  # the full report: the facts, then the advice line
    assert done.returncode == 0 and "restart_marker_rewrite False" in done.stdout, done.stdout
    assert "_jpegcrop not built" not in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("_jpegtran not built: prepare-shards' restart-marker"), done.stdout


def test_doctor_extensions_is_silent_when_both_import():
    import importlib

    import pytest

    try:
        for module in ("imagenet_shards.train.loader._jpegcrop", "imagenet_shards.pipeline.prepare._jpegtran"):
            importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"an extension is not built here: {e}")
    done = _doctor("", "--extensions")
    assert done.returncode == 0 and done.stdout == "", done.stdout


def test_an_extension_built_from_older_sources_is_named_with_what_it_lacks(monkeypatch):
    import sys
    import types

    from imagenet_shards.pipeline.tools import doctor

    old = types.ModuleType("_jpegtran")  # what an in-place build from before the pixel encoder imports as
    old.restart_rows = old.check = lambda data: None
    monkeypatch.setitem(sys.modules, "imagenet_shards.pipeline.prepare._jpegtran", old)
    missing = doctor.missing_extensions()
    assert missing["imagenet_shards.pipeline.prepare._jpegtran"] == ("built from older sources: it has no yuv420; "
                                                                     "rebuild it")
    [line] = [x for x in doctor.extension_lines(missing) if x.startswith("_jpegtran")]
    assert "derive encodes the pixel form with numpy" in line and "make setup" in line
