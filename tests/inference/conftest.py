"""One flip-TTA checkpoint and its exports for the inference tests (built once per session)."""

from __future__ import annotations

import pytest

from helpers import Artifacts, trained_artifacts


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Artifacts:
    return trained_artifacts(tmp_path_factory.mktemp("inference_artifacts"))
