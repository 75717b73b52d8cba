"""Augmentation, both sides of the copy to the device in one place: `policies` (CPU: the per-sample
RandAugment/TrivialAugment/AutoAugment policies the loader workers apply to a uint8 crop), `device`
(on the device, after normalization: MixUp/CutMix and random erasing of a batch), `gpu_crop` (the
batched random-resized and centre crops of `--gpu-decode`) and `interpolation` (the crops' resize
filter names and timm's per-image random bilinear/bicubic draw, for both loaders). It imports
nothing of the loader or the trainer: both call down into it."""
