"""The label-space tables in manifests/label-spaces: counts, hashes and order as the registry and
timm's dataset cards state them, and the one reader of a label-space FILE."""

from __future__ import annotations

import hashlib

import pytest

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes, wnid_names
from imagenet_shards.pipeline.format.label_spaces import (LABEL_SPACES_DIR, PRESENT, WNID_RE, LabelSpaceError,
                                                          known_names, label_space, label_space_option,
                                                          present_space, read_label_space_file, registry,
                                                          wnid_lemmas)

# The counts the issue and timm's cards give; the registry must agree with them and with the files.
COUNTS = {"imagenet-1k": 1000, "imagenet-22k": 21841, "imagenet-12k": 11821, "imagenet-21k-goog": 21843,
          "imagenet-21k-miil": 11221, "imagenet-21k-miil-w21": 10450}


def test_every_known_space_has_its_count_its_hash_and_sorted_unique_wnids():
    assert set(known_names()) == set(COUNTS)
    for name, n in COUNTS.items():
        space = label_space(name)
        entry = registry()["spaces"][name]
        assert space.num_classes == entry["num_classes"] == n
        assert list(space.wnids) == sorted(set(space.wnids)) and all(WNID_RE.match(w) for w in space.wnids)
        assert space.sha256 == entry["sha256"]
        if entry["file"].endswith(".txt"):  # a byte-for-byte copy of timm's file
            assert hashlib.sha256((LABEL_SPACES_DIR / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]


def test_the_imagenet_1k_space_is_the_class_table_and_timms_list():
    assert label_space("imagenet-1k").wnids == tuple(c.wnid for c in imagenet_1k_classes())
    # timm/data/_info/imagenet_synsets.txt's sha256 (manifests/imagenet-1k/README.md)
    assert label_space("imagenet-1k").sha256 == "70002b0ff5de60a3a17a82dbfcff291931f96225ddf941ad2e182fc39e183d15"


def test_how_the_spaces_relate():
    s = {n: set(label_space(n).wnids) for n in COUNTS}
    assert s["imagenet-12k"] <= s["imagenet-22k"] and s["imagenet-21k-miil"] <= s["imagenet-12k"]
    assert s["imagenet-21k-miil-w21"] <= s["imagenet-21k-miil"]
    assert s["imagenet-21k-goog"] - s["imagenet-22k"] == {"n03931044", "n09859684"}
    assert s["imagenet-1k"] - s["imagenet-22k"] == {"n04399382"}  # teddy bear: not in fall11


def test_every_wnid_of_every_space_has_a_name_and_the_1k_names_are_the_class_tables():
    lemmas = wnid_lemmas()
    assert len(lemmas) == registry()["names"]["entries"]
    assert set().union(*(label_space(n).wnids for n in COUNTS)) <= set(lemmas)
    assert all(wnid_names()[c.wnid] == c.name for c in imagenet_1k_classes())


def test_a_label_space_file_keeps_its_order_and_ignores_comments_and_names(tmp_path):
    f = tmp_path / "space.txt"
    f.write_text("# my head\nn02085782 Japanese spaniel\n\nn01440764\tteach\nn00004475  # organism\n")
    space = read_label_space_file(f)
    assert space.wnids == ("n02085782", "n01440764", "n00004475")
    assert space.index["n00004475"] == 2 and space.name == "file" and space.dataset == "imagenet21k"
    assert label_space_option(str(f)) == space
    assert label_space_option(PRESENT) == PRESENT
    assert label_space_option("imagenet-12k") is label_space("imagenet-12k")


@pytest.mark.parametrize("text, line, words", [
    ("n01440764\nn0144076\n", 2, "starts with 'n0144076', not a WNID"),
    ("n01440764\n\nn01443537\nn01440764 tench\n", 4, "repeats n01440764 (first on line 1)"),
    ("tench\n", 1, "starts with 'tench'"),
])
def test_a_bad_label_space_file_is_refused_naming_the_line(tmp_path, text, line, words):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(LabelSpaceError) as e:
        read_label_space_file(f)
    assert f"line {line} " in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_an_unknown_name_or_empty_file_is_refused_in_one_line(tmp_path):
    with pytest.raises(LabelSpaceError, match="unknown label space 'imagenet-5k': known are imagenet-1k, "):
        label_space_option("imagenet-5k")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(LabelSpaceError, match="lists no WNIDs"):
        read_label_space_file(tmp_path / "empty.txt")


def test_present_is_the_sources_wnids_sorted():
    space = present_space(["n01443537", "n01440764", "n01443537"])
    assert space.wnids == ("n01440764", "n01443537") and space.dataset == "imagenet1k"
    assert present_space(["n00004475"]).dataset == "imagenet21k"
