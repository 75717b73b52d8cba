"""The prefetcher's last step and the ceiling's cache key, on CPU tensors."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from imagenet_shards.train.trainer.watch import ceiling
from imagenet_shards.train.trainer.config import TrainConfig
from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.prefetch import DevicePrefetcher, to_model_layout


class Ops(TorchDispatchMode):
    """The aten ops run inside the block."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_dtype_and_channels_last_are_one_pass():
    x = torch.randn(4, 3, 8, 8)
    for dtype, channels_last in ((torch.bfloat16, True), (torch.float32, True), (torch.bfloat16, False)):
        with Ops() as ops:
            y = to_model_layout(x, dtype, channels_last)
        assert ops.names == ["aten._to_copy"], (dtype, channels_last, ops.names)  # no clone/contiguous first
        assert y.dtype == dtype and y.is_contiguous(memory_format=torch.channels_last) == channels_last
        assert torch.equal(y.float(), x.to(dtype).float())
    assert to_model_layout(x, torch.float32, False) is x


def test_prefetched_batches_come_out_in_the_model_layout():
    images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    batch = next(iter(DevicePrefetcher([(images, torch.arange(4))], torch.device("cpu"), dtype=torch.bfloat16,
                                       channels_last=True)))
    assert batch.images.dtype == torch.bfloat16 and batch.images.is_contiguous(memory_format=torch.channels_last)


def test_the_ceiling_is_keyed_by_the_number_of_classes(tmp_path):
    config = TrainConfig(data=None, out=str(tmp_path), arch="resnet18")
    info = DistInfo(0, 1, 0, torch.device("cpu"))
    ceiling.write_ceiling(tmp_path, ceiling.ceiling_key(config, info, 176, 1000), 123.0)
    assert ceiling.read_ceiling(tmp_path, ceiling.ceiling_key(config, info, 176, 1000)) == 123.0
    assert ceiling.read_ceiling(tmp_path, ceiling.ceiling_key(config, info, 176, 21841)) is None
    assert json.loads((tmp_path / ceiling.SYNTHETIC_FILE).read_text())["key"]["num_classes"] == 1000


def test_the_augmentation_state_is_kept_back_to_the_start_of_a_long_step():
    """--accumulate 20: a stop past its deadline saves the state from before the step's first batch,
    20 batches behind the one held ahead; the trainer keeps --accumulate + 2 (runner.Run)."""
    from imagenet_shards.train.augment.device import DeviceAugment
    batches = [(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64))] * 30
    aug = DeviceAugment(num_classes=4, mixup=0.2, cutmix=0.0, random_erase=0.0, erase_fill="const")
    for keep, kept in ((16, False), (22, True)):
        pre = DevicePrefetcher(batches, torch.device("cpu"), aug=aug, keep=keep)
        it = iter(pre)
        for _ in range(20):  # step 1 ended after batch 1, 19 micro-batches of step 2, one held ahead
            next(it)
        if kept:
            assert pre.rng_state(1)["numpy"] != pre.rng_state(2)["numpy"]
        else:
            with pytest.raises(ValueError, match="no augmentation state kept for batch 1"):
                pre.rng_state(1)
