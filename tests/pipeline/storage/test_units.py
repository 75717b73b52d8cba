"""imagenet_shards.pipeline.storage.units: sizes read from people and shown to them."""

from __future__ import annotations

import argparse

import pytest

from imagenet_shards.pipeline.storage import human_bytes, parse_size, positive_size


@pytest.mark.parametrize("text,value", [
    ("0", 0), ("4096", 4096), ("12B", 12), ("1KB", 1000), ("256MB", 256_000_000), ("256mb", 256_000_000),
    ("1.5GB", 1_500_000_000), ("2TB", 2 * 10**12), ("1KiB", 1024), ("64MiB", 64 * 2**20),
    ("1.5GiB", 3 * 2**29), ("1TiB", 2**40), (" 10 MB ", 10_000_000),
])
def test_parse_size_reads_si_and_binary_units(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "MB", "ten MB", "5XB", "1..5GB", "-5MB", "5 M B"])
def test_parse_size_refuses_what_is_not_a_size_with_one_line(text):
    with pytest.raises(ValueError) as e:
        parse_size(text)
    assert isinstance(e.value, argparse.ArgumentTypeError) and "\n" not in str(e.value)


def test_positive_size_refuses_zero_and_serves_as_an_argparse_type():
    with pytest.raises(ValueError, match="positive"):
        positive_size("0MB")
    p = argparse.ArgumentParser()
    p.add_argument("--shard-bytes", type=positive_size)
    assert p.parse_args(["--shard-bytes", "256MB"]).shard_bytes == 256_000_000
    with pytest.raises(SystemExit):
        p.parse_args(["--shard-bytes", "lots"])


@pytest.mark.parametrize("n,si,binary", [
    (0, "0 B", "0 B"), (999, "999 B", "999 B"), (1000, "1.0 KB", "1000 B"), (1024, "1.0 KB", "1.0 KiB"),
    (33_800_000, "33.8 MB", "32.2 MiB"), (5 * 10**12, "5.0 TB", "4.5 TiB"), (3 * 10**15, "3000.0 TB", "2728.5 TiB"),
])
def test_human_bytes(n, si, binary):
    assert human_bytes(n) == si and human_bytes(n, binary=True) == binary


def test_a_printed_size_reads_back_close_to_itself():
    for n in (1, 1234, 5_678_901, 9_876_543_210):
        text = human_bytes(n).replace(" ", "")
        assert abs(parse_size(text) - n) <= 0.05 * n
