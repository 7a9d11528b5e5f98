"""ImageFolderDataModule: layout, splits, resizing, channels, corrupt files and clear errors."""

import logging

import pytest
import torch

from helpers import make_module, make_trainer
from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.data.preset import AugmentPreset


def _dm(root, **kw):
    kw.setdefault("cache", False)
    kw.setdefault("batch_size", 4)
    kw.setdefault("val_size", 3)
    kw.setdefault("test_size", 3)
    return ImageFolderDataModule(str(root), image_size=8, **kw)


def test_carves_test_and_val_from_train_with_fixed_seed(image_root):
    dm = _dm(image_root)
    dm.setup()
    assert dm.classes == ["cat", "dog", "eel"] and dm.num_classes == 3
    assert {k: len(v) for k, v in dm.splits.items()} == {"train": 24, "test": 3, "val": 3}
    assert dm.splits["train"].images.shape == (24, 3, 8, 8)  # resized from 12x12
    assert dm.splits["train"].images.dtype == torch.uint8
    again = _dm(image_root)
    again.setup()
    for name in ("train", "val", "test"):
        assert torch.equal(dm.splits[name].labels, again.splits[name].labels)
        assert torch.equal(dm.splits[name].images, again.splits[name].images)
    # class k was drawn around k*40+20: labels follow the sorted folder names
    means = dm.splits["train"].images.float().mean((1, 2, 3))
    for k in range(3):
        assert abs(means[dm.splits["train"].labels == k].mean().item() - (k * 40 + 20)) < 5


def test_carved_test_split_does_not_depend_on_the_training_seed(image_root):
    a, b = _dm(image_root, seed=1), _dm(image_root, seed=2)
    a.setup()
    b.setup()
    assert torch.equal(a.splits["test"].images, b.splits["test"].images)
    assert not torch.equal(a.splits["val"].images, b.splits["val"].images)  # val follows seed
    c = _dm(image_root, split_seed=5)
    c.setup()
    assert not torch.equal(a.splits["test"].images, c.splits["test"].images)


def test_uses_given_val_and_test_folders(full_root):
    dm = _dm(full_root, num_classes=3)
    dm.setup()
    assert {k: len(v) for k, v in dm.splits.items()} == {"train": 24, "val": 6, "test": 9}
    assert dm.splits["test"].labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_grayscale_and_loader_in_a_plain_loop(image_root):
    dm = _dm(image_root, num_channels=1, augment=AugmentPreset(crop_padding=1, hflip=True))
    dm.setup()
    assert dm.splits["train"].images.shape[1] == 1 and dm.mean == (0.449,)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64


def test_fast_dev_run_trains(image_root):
    dm = _dm(image_root, augment=AugmentPreset(crop_padding=1, hflip=True))
    module = make_module(dm)
    trainer = make_trainer(fast_dev_run=2)
    trainer.fit(module, datamodule=dm)
    assert trainer.state.finished


def test_num_classes_mismatch_names_the_folder(image_root):
    with pytest.raises(
        ValueError,
        match=r"data.num_classes=10 but .*images/train has 3 class folders: cat, dog, eel; set "
        r"data.num_classes=3 or leave it unset\.$",
    ):
        _dm(image_root, num_classes=10).setup()


def test_missing_root_and_missing_train(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"ImageFolder root .*nowhere does not exist; set data.root"
    ):
        _dm(tmp_path / "nowhere").setup()
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"empty has no train/ folder; expected .*train/<class>/<images>"
    ):
        _ = _dm(tmp_path / "empty").classes


def test_no_class_folders_and_empty_class(tmp_path, make_folder):
    (tmp_path / "r" / "train").mkdir(parents=True)
    with pytest.raises(
        ValueError, match=r"r/train has no class folders; put each class's images in"
    ):
        _dm(tmp_path / "r").setup()
    make_folder(tmp_path / "r", "train", {"a": 2})
    (tmp_path / "r" / "train" / "b").mkdir()
    with pytest.raises(
        ValueError,
        match=r"Class folder .*train/b has no images .*add images to it or remove the folder",
    ):
        _dm(tmp_path / "r").setup()


def test_val_folder_with_unknown_class(full_root, make_folder):
    make_folder(full_root, "val", {"zebra": 1})
    with pytest.raises(ValueError, match=r"val has class folders not in .*train: zebra"):
        _dm(full_root).setup()


def test_corrupt_file_fails_by_path_or_is_skipped_and_counted(image_root, caplog):
    bad = image_root / "train" / "dog" / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(
        ValueError, match=r"Cannot read image .*dog/bad\.jpg: .*data\.on_corrupt=skip"
    ):
        _dm(image_root).setup()
    dm = _dm(image_root, on_corrupt="skip")
    with caplog.at_level(logging.WARNING):
        dm.setup()
    assert len(dm.skipped) == 1 and "bad.jpg" in dm.skipped[0]
    assert sum(len(s) for s in dm.splits.values()) == 30
    assert any("Skipped 1 unreadable image(s)" in r.getMessage() for r in caplog.records)


def test_a_split_with_no_readable_image_names_a_file_and_the_fix(tmp_path):
    for name in ("a", "b"):
        (tmp_path / "r" / "train" / name).mkdir(parents=True)
        (tmp_path / "r" / "train" / name / "x.png").write_bytes(b"not an image")
    with pytest.raises(
        ValueError,
        match=r"No readable images in .*r/train: all 2 files failed to decode "
        r"\(first: .*a/x\.png: .*\)\. Fix or replace them .*or point data\.root at another",
    ):
        _dm(tmp_path / "r", on_corrupt="skip").setup()


def test_bad_arguments(image_root):
    with pytest.raises(ValueError, match="Unknown on_corrupt 'ignore'; use one of fail, skip"):
        _dm(image_root, on_corrupt="ignore")
    with pytest.raises(ValueError, match="num_channels must be 1 .* or 3 .*got 4"):
        _dm(image_root, num_channels=4)
    with pytest.raises(
        ValueError,
        match=r"data\.mean has 1 values but the images have 3 channels \(data\.mean=\[0\.5\]\); "
        r"set data\.mean to 3 values, one per channel\.",
    ):
        _dm(image_root, mean=(0.5,))
    with pytest.raises(
        ValueError,
        match=r"data\.test_size=30 leaves no train or no test data out of 30 training images; .*or add a .*test folder",
    ):
        _dm(image_root, test_size=30).setup()


def test_imagefolder_from_the_command_line_infers_the_classes(image_root, tmp_path):
    from helpers.hydra_configs import QUIET_TRAINER, compose
    from lightning_cls.train import train

    overrides = QUIET_TRAINER + [
        "data=imagefolder",
        f"data.root={image_root}",
        "data.image_size=8",
        "data.cache=false",
        "data.val_size=3",
        "data.test_size=3",
        "data.batch_size=4",
        "trainer.max_epochs=1",
        "model.image_size=8",
    ]
    cfg = compose("train", overrides, tmp_path)
    assert cfg.data.num_classes is None  # no `Missing mandatory value: data.num_classes`
    summary = train(cfg)
    ckpt = torch.load(summary["best_ckpt"], map_location="cpu", weights_only=False)
    assert ckpt["hyper_parameters"]["classes"] == ["cat", "dog", "eel"]
    assert ckpt["state_dict"]["net.classifier.4.weight"].shape[0] == 3


# -- photos: aspect ratio, EXIF, odd modes ------------------------------------------------------
def _photo_bytes(img, fmt, **save):
    import io

    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def test_photo_quirks_decode_to_what_a_viewer_shows():
    import numpy as np
    from PIL import Image

    from lightning_cls.inference.images import decode_image

    # EXIF orientation 6 (display rotated 90° clockwise): stored left half red -> shown on top.
    stored = np.zeros((20, 40, 3), np.uint8)
    stored[:, :20, 0], stored[:, 20:, 2] = 255, 255
    exif = Image.Exif()
    exif[0x0112] = 6
    jpeg = _photo_bytes(Image.fromarray(stored), "JPEG", exif=exif, quality=95)
    out = decode_image(jpeg, 20, 3)  # (3, 20, 20): the centre of the upright 20x40 image
    assert out[0, 2, 10] > 200 and out[2, 2, 10] < 50  # top: red
    assert out[2, 17, 10] > 200 and out[0, 17, 10] < 50  # bottom: blue
    # CMYK JPEG: pure magenta+yellow ink is red.
    cmyk = Image.new("CMYK", (16, 16), (0, 255, 255, 0))
    out = decode_image(_photo_bytes(cmyk, "JPEG", quality=95), 16, 3)
    assert out[0].mean() > 200 and out[1].mean() < 60 and out[2].mean() < 60
    # 16-bit grayscale PNG: a full-range ramp is mid-gray on average, not clipped to white.
    ramp = (np.arange(32 * 32, dtype=np.float64).reshape(32, 32) * 65535 / 1023).astype(np.uint16)
    out = decode_image(_photo_bytes(Image.fromarray(ramp), "PNG"), 32, 1)
    assert 120 < out.mean() < 135 and out.min() == 0 and out.max() == 255
    # Palette PNG with a transparent entry (stored colour black): composited over white.
    pal = Image.new("P", (8, 8), 0)
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    pal.paste(1, (0, 0, 4, 8))  # left half: opaque red; right half: transparent index 0
    out = decode_image(_photo_bytes(pal, "PNG", transparency=0), 8, 3)
    assert out[:, :, 6].tolist() == [[255] * 8] * 3  # white, not black
    assert out[:, 0, 0].tolist() == [255, 0, 0]


def test_photo_decode_is_torchvisions_resize_and_center_crop():
    import numpy as np
    from PIL import Image
    from torchvision import transforms as T

    from lightning_cls.inference.images import decode_image

    rng = np.random.default_rng(0)
    for w, h in [(90, 60), (41, 77)]:
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        ref = T.Compose([T.Resize(36), T.CenterCrop(32), T.PILToTensor()])(img)
        out = decode_image(_photo_bytes(img, "PNG"), 32, 3, resize_size=36)
        assert torch.equal(torch.from_numpy(out.copy()), ref)
    with pytest.raises(ValueError, match="Need 1 <= image_size <= resize_size"):
        decode_image(_photo_bytes(img, "PNG"), 32, 3, resize_size=30)


def test_decode_size_caches_squares_and_crops_them(tmp_path, make_folder):
    from torchvision import transforms as T

    root = make_folder(tmp_path / "photos", "train", {"a": 6, "b": 6}, size=20)
    dm = _dm(root, decode_size=12, augment="photo", val_size=2, test_size=2)
    dm.setup()
    assert dm.splits["train"].images.shape[-2:] == (12, 12)  # the cached decode size
    assert dm.spec.resize_size == 12 and dm.spec.image_size == 8
    val = dm.splits["val"].images
    x, _ = next(iter(dm.val_dataloader()))  # outside a Trainer: batches come augmented
    expected = dm.batch_augment()(T.CenterCrop(8)(val[: len(x)]), train=False)
    torch.testing.assert_close(x, expected, rtol=0, atol=0)
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 8, 8)
    module = make_module(dm)
    assert module.hparams.resize_size == 12  # the eval resize travels in the checkpoint
    with pytest.raises(ValueError, match="data.decode_size=6 is smaller than data.image_size=8"):
        _dm(root, decode_size=6)


def test_every_unreadable_file_is_listed_with_its_reason(image_root):
    for name in ("bad1.jpg", "bad2.jpg", "bad3.png"):
        (image_root / "train" / "dog" / name).write_bytes(b"not an image")
    with pytest.raises(
        ValueError,
        match=r"Cannot read 3 images: .*bad1\.jpg: .+; .*bad2\.jpg: .+; .*bad3\.png: .+\. Fix",
    ):
        _dm(image_root).setup()
