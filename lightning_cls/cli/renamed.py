"""Keys a command renamed: the old spelling still works, with one line naming the new key.

``serve`` took the model file as ``artifact=`` and trust as ``serve.trust_artifact=`` while
predict, eval, export, calibrate and explain say ``ckpt_path=`` and ``trust_artifact=``; one
name now serves every command; and ``reject=null`` (no rule) became ``reject=none`` when
``reject`` turned into a config group; the augmentation options left ``data`` for their own
group (``data.hflip=`` is ``augment.hflip=``, conf/augment); train's ``tta_flip``/
``tta_translate``/``tta_tolerance`` and ``tta=full|selective`` became the ``tta`` group's
``tta.flip``, ... and ``tta.mode``. Calibration's flat keys became the ``calibration`` group's
(``conf/calibration``): ``calibrate=true`` is ``calibration=default``, ``reject_keep=`` is
``calibration.keep=``, ``temperature_fit=``, ``conformal=``, ``conformal_method=`` (and the
calibrate command's ``temperature=``, ``choose_threshold=``) are ``calibration.<key>=``, a rule's
old flat keys are its ``reject.<option>=`` (the rule's module names them: ``rules/knn.py``'s
``RENAMED``); train's flat task options
(``label_smoothing=``, ``mixup.<option>=``, ``loss.<option>=``) are ``task.<option>=``.
``renamed(config_name, args)`` rewrites the old spelling on the command line before Hydra composes (so sweeps, ``+``/``~`` prefixes and the saved overrides all
use the new key) and writes one ``warning:`` line per old key to stderr. Export's old keys
(``READ_OLD``) go on as they are, for ``ExportConfig``'s reader of the old layout.
"""

from __future__ import annotations

import sys

from lightning_cls.inference.rules import knn

# Calibration's flat keys (train and calibrate): the ``calibration`` group's, a rule's own.
_CALIBRATION = {
    "temperature_fit": "calibration.temperature_fit",
    "reject_keep": "calibration.keep",
    "conformal": "calibration.conformal",
    "conformal_method": "calibration.conformal_method",
    **knn.RENAMED,
}
# A task's options, once flat keys of train.yaml (label_smoothing, mixup.*, loss.*): the task's.
_TASK = {"label_smoothing": "task.label_smoothing"}
_TASK.update({f"mixup.{k}": f"task.{k}" for k in ("mixup_alpha", "cutmix_alpha", "mix_prob")})
_TASK.update(
    {f"loss.{k}": f"task.{k}" for k in ("class_weights", "class_weight_method", "pos_weight")}
)
# {primary config: {old key: new key}}
RENAMED: dict[str, dict[str, str]] = {
    "serve": {"artifact": "ckpt_path", "serve.trust_artifact": "trust_artifact"},
    # train's flat TTA keys became the one ``tta`` group's options (conf/tta/)
    "train": {
        "tta_flip": "tta.flip",
        "tta_translate": "tta.translate",
        "tta_tolerance": "tta.tolerance",
        **_CALIBRATION,
        "calibrate": "calibration",
        **_TASK,
    },
    "calibrate": {
        **_CALIBRATION,
        "temperature": "calibration.temperature",
        "choose_threshold": "calibration.choose_threshold",
    },
}
# {primary config: {old key: (its old values, new key)}}: ``tta=full|selective`` chose the
# mode before ``tta`` became a group (conf/tta/: none, flip, airbench, ...).
RENAMED_WITH_VALUES: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "train": {"tta": (("full", "selective"), "tta.mode")},
}
# Every command that composes data: the options of lightning_cls.data.AugmentPreset (spelt here,
# not imported: the CLI loads no torch; tests/data/test_preset.py keeps the two lists equal).
AUGMENT_OPTIONS = (
    "crop_padding",
    "hflip",
    "flip",
    "translate_pad",
    "random_resized_crop",
    "auto_augment",
    "random_erasing",
)
RENAMED_EVERYWHERE = {f"data.{key}": f"augment.{key}" for key in AUGMENT_OPTIONS}
# {group: {old value: new value}}, applied after the key's rename: ``reject`` became a config
# group (conf/reject/), and Hydra takes no ``null`` for a group; ``reject=null`` (the documented
# "no rule") means ``none``. ``calibrate=true|false`` (a flag once) is the option of the group.
_FLAG = {"true": "default", "True": "default", "false": "none", "False": "none", "null": "none"}
RENAMED_VALUES: dict[str, dict[str, str]] = {"reject": {"null": "none"}, "calibration": _FLAG}
# {primary config: old key prefixes} its config no longer declares, passed on as they are
# (``++``: added) for the reader that translates them with its own deprecation line naming the
# new key: lightning_cls.export.ExportConfig (export.opset -> export.onnx.opset, ...).
EXPORT_OLD = (
    "export.opset",
    "export.torchscript_modes",
    "export.openvino_precision",
    "export.quantize",
)
READ_OLD: dict[str, tuple[str, ...]] = {"export": EXPORT_OLD, "train": EXPORT_OLD}


def renamed(config_name: str | None, args: list[str]) -> list[str]:
    """``args`` with each old key of ``config_name``'s command spelt as its new key."""
    table = {**RENAMED_EVERYWHERE, **RENAMED.get(config_name or "", {})}
    old_keys = READ_OLD.get(config_name or "", ())
    out = []
    for arg in args:
        bare = arg.partition("=")[0].lstrip("+")
        if "=" in arg and any(bare == k or bare.startswith(f"{k}.") for k in old_keys):
            out.append(f"++{arg.lstrip('+')}")  # added where the config lacks it
            continue
        key, eq, value = arg.partition("=")
        prefix = key[: len(key) - len(key.lstrip("+~"))]
        old = key.lstrip("+~")
        new = table.get(old) if eq and not arg.startswith("-") else None
        values, by_value = RENAMED_WITH_VALUES.get(config_name or "", {}).get(old, ((), None))
        new = by_value if eq and value in values else new
        value = RENAMED_VALUES.get(new or old, {}).get(value, value) if eq else value
        if new is None:
            out.append(f"{key}={value}" if eq else arg)
            continue
        sys.stderr.write(
            f"warning: {old}= is deprecated and will be removed; use {new}= (same meaning): "
            f"{new}={value}\n"
        )
        # ``+artifact=`` added a key serve's config never had; ckpt_path is in it
        out.append(f"{'' if prefix == '+' else prefix}{new}={value}")
    return out
