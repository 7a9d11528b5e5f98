"""benchmarks/wrk_compare.py --quick: the project's load tool and wrk both load the server with
the OIP infer body (one served answer checked against the in-process logits first), every
answer a 200. Whether they agree within 10% is the full run's business (docs/benchmarks.md),
not a 1-s smoke run's. Needs Debian's wrk on PATH: skipped without it, except with ``CI=true``,
where it fails (.ci/run installs wrk)."""

import os
import shutil

import pytest

pytestmark = pytest.mark.slow


def test_wrk_compare_quick_runs_both_tools_with_only_200s(run_quick):
    if shutil.which("wrk") is None:
        reason = "wrk not on PATH (apt-get install wrk)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}: the independent load tool must run in CI")
        pytest.skip(reason)
    out = run_quick("wrk_compare.py", cwd=None, timeout=300)
    assert out["rounds"] == 1 and out["connections"] == 4
    for tool in ("project", "wrk"):
        assert out[tool]["median"] > 0 and len(out[tool]["per_round"]) == 1
    project_codes, wrk_summary = out["errors"]
    assert set(project_codes) == {"200"}  # JSON keys: every answer was a 200
    assert wrk_summary["requests"] > 0
    assert wrk_summary["non_2xx_3xx"] == 0 and wrk_summary["socket_errors"] == 0
    assert out["wrk_over_project"] == pytest.approx(
        out["wrk"]["median"] / out["project"]["median"], rel=1e-2
    )
