"""Distillation's options are checked when the ``Distiller`` is built, before any training:
one line naming the value and the fix. Hydra reads ``distill.alpha=true`` as ``True`` (an int
to ``isinstance``, so it was taken as 1.0), ``distill.temperature=inf`` as a float, and
``distill.trust_teacher=no`` as the string "no"."""

from __future__ import annotations

import math
import re

import pytest

from lightning_cls.training.distill import Distiller


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"alpha": True}, r"^distill\.alpha=True is not a weight from 0 to 1; .*alpha=0\.5\.$"),
        ({"alpha": math.nan}, r"^distill\.alpha=nan is not a weight from 0 to 1"),
        ({"alpha": "0.5"}, r"^distill\.alpha='0\.5' is not a weight from 0 to 1"),
        (
            {"temperature": math.inf},
            r"^distill\.temperature=inf must be a number above 0 and finite",
        ),
        ({"temperature": math.nan}, r"^distill\.temperature=nan must be a number above 0"),
        ({"temperature": True}, r"^distill\.temperature=True must be a number above 0"),
    ],
)
def test_bad_weights_and_temperatures_are_refused(trained, options, message):
    with pytest.raises(ValueError, match=message):
        Distiller(trained.ckpt, **options)


@pytest.mark.parametrize("value", ["no", "off", "false", "true", 1, None], ids=repr)
def test_trust_teacher_takes_a_real_boolean_only(trained, value):
    message = (
        rf"^distill\.trust_teacher={re.escape(repr(value))} is not a boolean; .* set "
        r"distill\.trust_teacher=true \(you trust its source\) or distill\.trust_teacher=false\.$"
    )
    with pytest.raises(TypeError, match=message):
        Distiller(trained.ckpt, trust_teacher=value)


def test_good_options_are_kept(trained):
    distiller = Distiller(trained.ckpt, alpha=1, temperature=2, trust_teacher=True)
    assert (distiller.alpha, distiller.temperature, distiller.trust_teacher) == (1.0, 2.0, True)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("distill.alpha=true", "error: distill.alpha=True is not a weight from 0 to 1"),
        ("distill.temperature=inf", "error: distill.temperature=inf must be a number above 0"),
        ("distill.trust_teacher=no", "error: distill.trust_teacher='no' is not a boolean"),
    ],
)
def test_train_refuses_them_in_one_line_before_fitting(
    trained, override, message, tmp_path, user_command
):
    argv = ["-m", "lightning_cls.train", f"distill.teacher={trained.ckpt}", override]
    argv += ["trainer.accelerator=cpu", f"paths.output_dir={tmp_path}/run"]
    out = user_command([*argv, f"hydra.run.dir={tmp_path}/run"], tmp_path)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 1 and len(errors) == 1, out.stderr[-3000:]
    assert errors[0].startswith(message), errors
    assert "Traceback" not in out.stderr
    # Nothing trained: no checkpoint, no results.
    assert not list((tmp_path / "run").rglob("*.ckpt"))
    assert not (tmp_path / "run" / "results.json").exists()
