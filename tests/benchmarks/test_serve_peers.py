"""benchmarks/serve_peers.py --quick: this server, MLServer, KServe's model server and the
FastAPI tutorial server each answer the same model's request as in-process onnxruntime does
(checked by the script before it loads them), then carry wrk's load with every answer a 200.
Which is faster is the full run's business (docs/benchmarks.md), not a 1-s smoke run's. Needs
Debian's wrk and the peers' environments (``make venv-peers``): skipped without them, except
with ``CI=true``, where it fails (.ci/run installs both)."""

import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PEERS = ("lightning_cls", "mlserver", "kserve", "fastapi_tutorial")


def test_serve_peers_quick_loads_every_server_without_errors(run_quick):
    missing = [] if shutil.which("wrk") else ["wrk (apt-get install wrk)"]
    missing += [v for v in (".venv-mlserver", ".venv-kserve") if not (ROOT / v).exists()]
    if missing:
        reason = f"not here: {', '.join(missing)} (make venv-peers)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}: the serving peers must run in CI")
        pytest.skip(reason)
    out = run_quick("serve_peers.py", cwd=ROOT, timeout=600)
    assert out["servers"] == list(PEERS) and out["missing"] == {}
    table = out["table"]["simplecnn"]
    for server in PEERS:
        for clients in ("1", "4"):
            row = table[server][clients]
            assert row["errors"] == 0, (server, clients, row)
            assert row["rps"]["median"] > 0 and row["cpu_s_per_1000"] > 0
            assert 0 < row["p50_ms"] <= row["p99_ms"]
    goal = out["goal"]["simplecnn"]
    per_round = goal["over_best_peer_at_4_per_round"]  # one round: the same ratio
    assert per_round["median"] == pytest.approx(goal["over_best_peer_at_4"], abs=0.01)
    assert goal["over_best_peer_at_4"] == pytest.approx(
        table["lightning_cls"]["4"]["rps"]["median"]
        / max(table[p]["4"]["rps"]["median"] for p in PEERS[1:]),
        rel=1e-2,
    )
