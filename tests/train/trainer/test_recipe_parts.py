"""The parts the published recipes need, each against its definition: BlurPool (FFCV), flip TTA,
LAMB (timm's behaviour), BCE with RSB's target threshold, EMA every N steps (torchvision), the
weight-decay rules, ReaL top-1, gradient accumulation (torchvision's zero-fill erasing:
tests/train/augment/test_device.py).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from imagenet_shards.train.trainer import real as R
from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.engine import StepRecord, evaluate, make_autocast, train_one_epoch, tta_logits
from imagenet_shards.train.trainer.lamb import Lamb
from imagenet_shards.train.trainer.loss import BinaryCrossEntropy, make_criterion
from imagenet_shards.train.trainer.model import (BlurPoolConv2d, ModelEma, build_model, build_optimizer, ema_due,
                                                 weight_decay_groups)
from imagenet_shards.train.trainer.prefetch import DevicePrefetcher

CPU = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


# ----------------------------------------------------------------------------- BlurPool

def test_blurpool_wraps_exactly_ffcvs_convs_with_the_binomial_filter():
    model = build_model("resnet50", 10, blurpool=True, zero_init_residual=False)
    wrapped = sorted(n for n, m in model.named_modules() if isinstance(m, BlurPoolConv2d))
    # FFCV: every Conv2d with max(stride) > 1 and >= 16 input channels; the 3-channel stem stays plain
    assert wrapped == [f"layer{i}.0.{c}" for i in (2, 3, 4) for c in ("conv2", "downsample.0")]
    k = torch.tensor([1.0, 2.0, 1.0])
    blur = model.layer2[0].conv2
    assert torch.equal(blur.blur_filter, (torch.outer(k, k) / 16).expand(128, 1, 3, 3))
    # forward = conv(depthwise blur with zero padding): an impulse comes out as the kernel
    x = torch.zeros(1, 128, 9, 9)
    x[0, :, 4, 4] = 1.0
    blurred = F.conv2d(x, blur.blur_filter, padding=1, groups=128)
    assert torch.allclose(blurred[0, 0, 3:6, 3:6], torch.outer(k, k) / 16)
    assert torch.allclose(blur(x), blur.conv(blurred))
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 10)


def test_zero_init_residual_is_a_choice():
    on = build_model("resnet18", 4)
    off = build_model("resnet18", 4, zero_init_residual=False)
    assert float(on.layer1[0].bn2.weight.detach().abs().sum()) == 0
    assert float(off.layer1[0].bn2.weight.detach().abs().sum()) > 0


# ----------------------------------------------------------------------------- weight-decay rules

def test_weight_decay_rules_pick_ffcvs_torchvisions_and_timms_parameters():
    model = build_model("resnet18", 4)
    names = {id(p): n for n, p in model.named_parameters()}

    def exempt(rule):
        groups = weight_decay_groups(model, 1e-4, rule)
        return sorted(names[id(p)] for g in groups if g["weight_decay"] == 0 for p in g["params"])

    assert exempt("none") == []
    bn_name = exempt("bn-name")
    assert "layer2.0.downsample.1.weight" not in bn_name and "layer1.0.bn1.weight" in bn_name  # FFCV's quirk
    assert set(exempt("norm")) == set(bn_name) | {f"layer{i}.0.downsample.1.{w}" for i in (2, 3, 4)
                                                   for w in ("weight", "bias")}
    assert set(exempt("1d")) == set(exempt("norm")) | {"fc.bias"}
    opt = build_optimizer(model, lr=0.1, momentum=0.9, nesterov=False, weight_decay=1e-4, no_bn_wd=False,
                          wd_exempt="bn-name")
    assert [g["weight_decay"] for g in opt.param_groups] == [1e-4, 0.0]


# ----------------------------------------------------------------------------- TTA

class _Batches(list):
    def set_epoch(self, epoch):
        pass


def test_flip_tta_is_the_sum_of_the_two_views_and_changes_the_eval():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3))  # not mirror-invariant
    x = torch.randn(5, 3, 4, 4)
    assert torch.allclose(tta_logits(model, x), model(x) + model(x.flip(3)))
    labels = tta_logits(model, x).argmax(1)
    plain_labels = model(x).argmax(1)
    assert not torch.equal(labels, plain_labels)  # the test data is one where TTA matters
    batches = DevicePrefetcher(_Batches([(torch.randint(0, 255, (5, 3, 4, 4), dtype=torch.uint8), labels)]),
                               torch.device("cpu"))
    images = next(iter(batches)).images
    expect_tta = (tta_logits(model, images).argmax(1) == labels).float().mean().item()
    expect_plain = (model(images).argmax(1) == labels).float().mean().item()
    autocast = make_autocast("none", torch.device("cpu"))
    assert evaluate(model, batches, autocast=autocast, info=CPU, tta=True)["top1"] == pytest.approx(expect_tta)
    assert evaluate(model, batches, autocast=autocast, info=CPU)["top1"] == pytest.approx(expect_plain)


# ----------------------------------------------------------------------------- LAMB

def reference_lamb_step(params, state, *, lr, wd, betas=(0.9, 0.999), eps=1e-6, max_norm=1.0):
    """One step of the algorithm as the module docstring (and timm 0.5's Lamb) states it, per tensor."""
    b1, b2 = betas
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p, _ in params)).item()
    clip = norm / max_norm if norm > max_norm else 1.0
    state["t"] = state.get("t", 0) + 1
    t = state["t"]
    for p, decay in params:
        g = p.grad / clip
        m, v = state.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        state[id(p)] = (m, v)
        u = (m / (1 - b1 ** t)) / (v.sqrt() / np.sqrt(1 - b2 ** t) + eps)
        if decay:
            u = u + decay * p.detach()
            w_norm, u_norm = p.detach().norm(), u.norm()
            u = u * (w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0)
        p.data -= lr * u


def test_lamb_matches_the_algorithm_with_clipping_trust_ratio_and_state_in_checkpoints():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3))
    ref = copy.deepcopy(model)
    groups = weight_decay_groups(model, 0.02, "1d")
    opt = Lamb(groups, lr=0.01, weight_decay=0.02)
    ref_params = [(p, 0.02 if p.ndim > 1 else 0.0) for p in ref.parameters()]
    state = {}
    x, y = torch.randn(8, 6) * 30, torch.randint(0, 3, (8,))  # large inputs: the global norm clip engages
    for _ in range(3):
        for m in (model, ref):
            m.zero_grad()
            F.cross_entropy(m(x), y).backward()
        assert torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())) > 1.0
        opt.step()
        reference_lamb_step(ref_params, state, lr=0.01, wd=0.02)
        for a, b in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    saved = copy.deepcopy(opt.state_dict())
    assert saved["param_groups"][0]["step"] == 3 and len(saved["state"]) == len(list(model.parameters()))
    resumed = Lamb(weight_decay_groups(copy.deepcopy(model), 0.02, "1d"), lr=0.01)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["step"] == 3
    assert all(torch.equal(resumed.state[p]["exp_avg"], opt.state[q]["exp_avg"])
               for p, q in zip([p for g in resumed.param_groups for p in g["params"]],
                               [p for g in opt.param_groups for p in g["params"]]))


# ----------------------------------------------------------------------------- BCE

def test_bce_targets_smoothing_and_rsbs_threshold():
    logits = torch.randn(4, 5)
    labels = torch.tensor([0, 1, 2, 3])
    plain = BinaryCrossEntropy()
    assert torch.equal(plain.targets(logits, labels), F.one_hot(labels, 5).float())
    assert plain(logits, labels) == pytest.approx(
        F.binary_cross_entropy_with_logits(logits, F.one_hot(labels, 5).float()).item())
    smooth = BinaryCrossEntropy(smoothing=0.1).targets(logits, labels)
    assert torch.allclose(smooth, F.one_hot(labels, 5).float() * 0.9 + 0.1 / 5)  # timm: on 1-s+s/C, off s/C
    # MixUp targets: the pair's weights 0.7/0.3 both clear 0.2; 0.9/0.1 only the larger one
    mixed = torch.zeros(2, 5)
    mixed[0, 0], mixed[0, 1] = 0.7, 0.3
    mixed[1, 2], mixed[1, 3] = 0.9, 0.1
    thresh = BinaryCrossEntropy(target_threshold=0.2).targets(logits[:2], mixed)
    assert thresh.tolist() == [[1, 1, 0, 0, 0], [0, 0, 1, 0, 0]]
    assert isinstance(make_criterion("ce", label_smoothing=0.1), torch.nn.CrossEntropyLoss)
    with pytest.raises(ValueError):
        make_criterion("focal")


# ----------------------------------------------------------------------------- EMA every N (torchvision)

def test_ema_due_keys_off_the_global_step_like_torchvisions_in_epoch_index():
    spe = 10  # torchvision updates when i % 32 == 0, i the iteration within the epoch
    due = [s for s in range(3 * spe) if ema_due(s, epoch=s // spe, steps_per_epoch=spe, every=4)]
    assert due == [0, 4, 8, 10, 14, 18, 20, 24, 28]


def test_torchvision_ema_copies_then_averages_with_a_constant_decay():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    ema = ModelEma(model, 0.9, ramp=False, copy_epochs=2)

    def bump():
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))

    for epoch in (0, 1):  # warmup epochs: n_averaged is reset, every update copies
        bump()
        ema.update(model, epoch)
        assert torch.equal(ema.module.weight, model.weight) and ema.n_averaged == 0
    bump()
    ema.update(model, 2)  # the first update after the warmup copies too (n_averaged was 0)
    assert torch.equal(ema.module.weight, model.weight) and ema.n_averaged == 1
    before = ema.module.weight.clone()
    bump()
    ema.update(model, 2)
    assert torch.allclose(ema.module.weight, 0.9 * before + 0.1 * model.weight)
    state = ema.state_dict()
    again = ModelEma(model, 0.9, ramp=False, copy_epochs=2)
    again.load_state_dict(state)
    assert (again.updates, again.n_averaged) == (4, 2)


def test_train_one_epoch_updates_the_ema_every_n_steps_and_accumulates():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3))
    data = _Batches([(torch.randint(0, 255, (4, 3, 4, 4), dtype=torch.uint8), torch.randint(0, 3, (4,)))
                     for _ in range(8)])
    batches = DevicePrefetcher(data, torch.device("cpu"))
    ema = ModelEma(model, 0.5, ramp=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kw = dict(optimizer=opt, scheduler=None, scaler=None, autocast=make_autocast("none", torch.device("cpu")),
              criterion=torch.nn.CrossEntropyLoss(), info=CPU, log_interval=100)
    stats = train_one_epoch(batches, StepRecord(model, ema=ema, ema_source=model, ema_every=3, steps_per_epoch=8, **kw),
                            epoch=1, step=8)
    assert stats.steps == 8 and ema.updates == 3  # in-epoch steps 0, 3, 6
    # two accumulated batches per step = one step on their concatenation (mean loss over 8 samples)
    start = copy.deepcopy(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kw["optimizer"] = opt
    stats = train_one_epoch(DevicePrefetcher(_Batches(data[:2]), torch.device("cpu")),
                            StepRecord(model, accumulate=2, **kw), epoch=1, step=0)
    assert stats.steps == 1
    twin = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3))
    twin.load_state_dict(start)
    x = torch.cat([next(iter(DevicePrefetcher(_Batches([b]), torch.device("cpu")))).images for b in data[:2]])
    y = torch.cat([b[1] for b in data[:2]])
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    torch.nn.functional.cross_entropy(twin(x), y).backward()
    twin_opt.step()
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), twin.parameters()))


# ----------------------------------------------------------------------------- ReaL

def test_real_table_shipped_and_top1_against_generated_labels():
    table = R.load_real_labels()
    assert len(table) == 50000 and sum(1 for x in table if not x) == 3163  # the paper's 46,837 labelled images
    assert max(max(x) for x in table if x) == 999
    labels = ((3,), (), (1, 2))  # val_00000001: {3}; val_00000002: not counted; val_00000003: {1, 2}
    real = R.RealLabels(labels)
    keys = ("ILSVRC2012_val_00000001", "ILSVRC2012_val_00000002", "ILSVRC2012_val_00000003")
    targets = real.targets(keys)
    assert targets.tolist() == [[3, -1], [-1, -1], [1, 2]]
    logits = torch.tensor([[0, 0, 0, 9.0], [9.0, 0, 0, 0], [0, 0, 0, 9.0]])  # right, (ignored), wrong
    hit, n = R.real_hits(logits, targets)
    assert (int(hit), int(n)) == (1, 2)
    batches = DevicePrefetcher(_Batches([(torch.zeros(3, 3, 4, 4, dtype=torch.uint8), torch.tensor([3, 0, 2]),
                                               keys)]), torch.device("cpu"))

    class Fixed(torch.nn.Module):
        def forward(self, x):
            return logits

    out = evaluate(Fixed(), batches, autocast=make_autocast("none", torch.device("cpu")), info=CPU, real=real)
    assert out["real_top1"] == 0.5 and out["real_samples"] == 2 and out["top1"] == pytest.approx(2 / 3)


def test_real_refuses_other_keys_and_label_spaces_in_one_line():
    with pytest.raises(R.RealLabelsError, match="original val keys") as e:
        R.RealLabels(((1,),)).targets(["n01440764_10026"])
    assert "\n" not in str(e.value)
    with pytest.raises(R.RealLabelsError, match="ImageNet-1k label space"):
        R.check_label_space({"classes": [{"index": 0, "wnid": "n01440764"}]})
    json.dumps(R.RealLabels(((1,),)).targets(["ILSVRC2012_val_00000001"]).tolist())


def test_eval_real_refuses_a_shard_set_outside_imagenet_1k_before_training(tiny_shards, tmp_path, capsys):
    from tests.fixtures.trainer import TINY, run_cli
    assert run_cli("--data", tiny_shards, "--out", tmp_path / "r", *TINY, "--eval-real") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ImageNet-1k label space" in err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_first_val_key_is_read_from_the_shards(tiny_shards):
    from imagenet_shards.pipeline.format.manifest import read_manifest
    key = R.first_val_key(str(tiny_shards), read_manifest(str(tiny_shards)))
    assert R.VAL_KEY.match(key)  # the synthetic archives keep the original val names
