"""``trainer.max_epochs=abc`` ends in one line naming the key and the type the Trainer takes
(cli/option_types.check_annotated_types, from the Trainer's annotations), not in a bare
AssertionError inside Lightning's fit loop."""

from __future__ import annotations

import typing

import pytest

from lightning_cls.cli.option_types import check_annotated_types


def _trainer(
    max_epochs: int | None = None,
    limit_train_batches: int | float | None = None,
    enable_progress_bar: bool | None = None,
    precision: typing.Literal[32, 16] | typing.Literal["bf16-mixed"] | None = None,
    devices: list[int] | str | int = "auto",
    plugins: typing.Any = None,
):
    """Annotated as pytorch_lightning.Trainer's parameters of the same names are."""


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("max_epochs", "trainer.max_epochs='abc' is not an integer; set trainer.max_epochs to an "
         "integer or null."),
        ("limit_train_batches", "trainer.limit_train_batches='abc' is not a number; set "
         "trainer.limit_train_batches to a number or null."),
        ("enable_progress_bar", "trainer.enable_progress_bar='abc' is not true or false; set "
         "trainer.enable_progress_bar to true or false or null."),
    ],
)  # fmt: skip
def test_text_for_a_number_names_the_key_and_the_type(option, message):
    with pytest.raises(TypeError, match=f"^{message}$".replace("(", r"\(").replace(")", r"\)")):
        check_annotated_types(_trainer, {option: "abc"}, "trainer")


def test_text_where_text_is_taken_passes():
    options = {"precision": "bf16-mixed", "devices": "auto", "plugins": "x", "max_epochs": 3}
    check_annotated_types(_trainer, {**options, "_target_": "x.Trainer"}, "trainer")


def test_the_cli_line(tmp_path, user_command):
    argv = ["-m", "lightning_cls.train", "trainer.max_epochs=abc", f"hydra.run.dir={tmp_path}/r"]
    out = user_command(argv, tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        "error: trainer.max_epochs='abc' is not an integer; set trainer.max_epochs to an integer "
        "or null."
    )
    assert "AssertionError" not in out.stderr
