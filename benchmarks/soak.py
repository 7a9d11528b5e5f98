"""Soak of ``python -m lightning_cls.serve``: ``--clients`` concurrent clients for ``--minutes``
on 127.0.0.1, a mix of good, slow and malformed requests, against issue 51's targets.

The server (its default settings, ONNX SimpleCNN with random weights made here offline by
``serve_setup.make_model``) is driven by three kinds of client, all bounded in count and time:

- good (5 in 8): ``/predict`` with a PNG and OIP v2 ``/v2/models/simplecnn/infer`` with the
  normalized FP32 tensor, on keep-alive connections; every 200 is checked against in-process
  ``Predictor`` output. Any other status, a transport error or a wrong answer is an error.
- slow (3 in 16): a body sent in pieces (completes: 200 expected), a body that stalls, headers
  that stall, a silent connection, an idle keep-alive connection. The server's own
  ``header_timeout_s`` / ``body_timeout_s`` / ``keep_alive_s`` must end them (408 or a close);
  the client gives up only after those plus a margin ("client_timeout": a finding).
- malformed (3 in 16): bad JSON, a wrong shape, non-finite numbers (NaN literal, 1e39), a body
  that is not an image, a declared 20 MB body, a garbage request line, an unknown model, a
  missing key. Any 4xx or a close is fine; a 5xx is a finding.

Every few seconds the server's resident memory and open file descriptors (its process tree,
psutil) are sampled; file descriptors are also counted idle before and after the load (the
load's own connections closed). Targets (issue 51): 0 errors on good requests, RSS growth
<= 5% from the first sample after the first minute (warm-up) to the last, file descriptors
idle-after <= idle-before + 2, p99 of good requests in the last minute within 20% of the first.
PASS/FAIL per target; exit 1 on a FAIL (not with --quick); last line: one JSON object.

    python benchmarks/soak.py             # 10 minutes, 64 clients, windows of 60 s
    python benchmarks/soak.py --quick     # ~20 s, 8 clients, 5-s windows, 2-s server timeouts
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
from http_client import Connection
from serve_setup import QUIET, Server, correct_answer, make_model, png_images

MODEL = "simplecnn"
OIP_PATH = f"/v2/models/{MODEL}/infer"
TARGETS = {"rss_growth_pct": 5.0, "fd_growth": 2, "p99_ratio_tolerance": 0.20}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _request(path: str, body: bytes, content_type: str, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {n}\r\n\r\n"
    )
    return head.encode("latin-1")


def oip_body(tensor: np.ndarray) -> bytes:
    """One (C, H, W) normalized image -> an OIP v2 JSON infer request."""
    data = {"name": "input", "datatype": "FP32", "shape": [1, *tensor.shape]}
    return json.dumps({"inputs": [{**data, "data": tensor.ravel().tolist()}]}).encode()


def malformed_requests(png: bytes, oip: bytes) -> dict[str, bytes]:
    """Name -> the raw bytes of one malformed request (each a 4xx, never a 5xx)."""
    j = "application/json"
    shape = {"name": "input", "datatype": "FP32", "shape": [1, 3, 5, 5], "data": [0.0] * 75}
    nan = oip.replace(b'"data": [', b'"data": [NaN, ', 1)
    big = oip.replace(b'"data": [', b'"data": [1e39, ', 1)
    bodies = {
        "bad_json": (OIP_PATH, b'{"inputs": [{"name": "input",', j),
        "bad_json_predict": ("/predict", b'{"image": "abc', j),
        "missing_key": ("/predict", b'{"top_k": 3}', j),
        "wrong_shape": (OIP_PATH, json.dumps({"inputs": [shape]}).encode(), j),
        "nan": (OIP_PATH, nan, j),
        "overflow_inf": (OIP_PATH, big, j),
        "not_an_image": ("/predict", png[:40] + b"\x00" * 200, "image/png"),
        "unknown_model": ("/v2/models/nope/infer", oip, j),
    }
    out = {name: _request(p, b, t) + b for name, (p, b, t) in bodies.items()}
    out["garbage_line"] = b"GARBAGE \x00\x01 NOT-HTTP\r\n\r\n"
    # A declared 20 MB body (max_body_bytes is 10 MB) of which 64 KB is sent.
    out["oversized"] = _request("/predict", b"", "image/png", 20_000_000) + b"\x00" * 65536
    return out


async def exchange(port: int, parts: list[tuple[bytes, float]], timeout: float) -> str:
    """Send each (bytes, delay-before) part on a fresh connection, then read the status line:
    the status code, "closed" (closed without an answer) or "client_timeout"."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    except (TimeoutError, OSError):
        return "connect_error"

    async def talk() -> str:
        try:
            for data, delay in parts:
                await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass  # the server answered (413, 408) and closed before the rest: read that answer
        try:
            line = await reader.readline()
        except ConnectionError:
            return "closed"
        return line.split()[1].decode() if line.startswith(b"HTTP/") else "closed"

    try:
        return await asyncio.wait_for(talk(), timeout)
    except TimeoutError:
        return "client_timeout"
    finally:
        writer.close()


class Soak:
    def __init__(self, server: Server, data: dict, args, timeouts: dict):
        self.server, self.args, self.t = server, args, timeouts
        self.port = server.port
        self.pngs = png_images(data["images"])
        spec = json.loads(data["weights"].with_suffix(".json").read_text())
        mean = np.array(spec["mean"], np.float32)[:, None, None]
        std = np.array(spec["std"], np.float32)[:, None, None]
        x = data["images"].numpy().astype(np.float32) / 255  # (N, C, H, W)
        self.oips = [oip_body((img - mean) / std) for img in x]
        self.expected, self.classes = data["expected"]["onnx"], data["classes"]
        self.bad = malformed_requests(self.pngs[0], self.oips[0])
        self.codes: dict[str, dict[str, int]] = {}
        self.good_latency: list[tuple[float, float]] = []  # (start offset s, seconds)
        self.good_errors, self.wrong, self.samples = 0, 0, []
        self.t0 = self.deadline = 0.0

    def count(self, kind: str, code) -> None:
        per = self.codes.setdefault(kind, {})
        per[str(code)] = per.get(str(code), 0) + 1

    async def good_client(self, k: int) -> None:
        conn = Connection("127.0.0.1", self.port)
        try:
            for i in range(k, 10**7, self.args.clients):  # bounded in count as well as time
                if time.perf_counter() >= self.deadline:
                    break
                idx, oip = i % len(self.pngs), i % 4 == 0  # 1 in 4 good requests is OIP v2
                kind = "good_oip" if oip else "good_predict"
                path, body = (OIP_PATH, self.oips[idx]) if oip else ("/predict", self.pngs[idx])
                ctype = "application/json" if oip else "image/png"
                start = time.perf_counter()
                try:
                    r = await asyncio.wait_for(conn.post(path, body, ctype), 30)
                except (TimeoutError, OSError, asyncio.IncompleteReadError) as err:
                    self.count(kind, type(err).__name__)
                    self.good_errors += 1
                    await conn.close()
                    continue
                self.count(kind, r.status_code)
                if r.status_code != 200:
                    self.good_errors += 1
                    print(f"good {kind} -> {r.status_code}: {r.content[:300]!r}", file=sys.stderr)
                    continue
                self.good_latency.append((start - self.t0, time.perf_counter() - start))
                if not self.correct(json.loads(r.content), idx, oip):
                    self.wrong += 1
        finally:
            await conn.close()

    def correct(self, body: dict, idx: int, oip: bool) -> bool:
        if not oip:
            return correct_answer(body, self.expected[idx], self.classes)
        probs = {o["name"]: o["data"] for o in body["outputs"]}["probabilities"]
        return bool(np.allclose(probs, self.expected[idx].numpy(), atol=1e-4))

    async def slow_client(self, k: int) -> None:
        h, b = self.t["header_timeout_s"], self.t["body_timeout_s"]
        png = self.pngs[k % len(self.pngs)]
        head = _request("/predict", png, "image/png")
        q = len(png) // 4
        kinds = {  # name -> (parts, client timeout)
            "slow_body_completes": (
                [(head, 0)]
                + [(png[i * q : (i + 1) * q], 0.2) for i in range(3)]
                + [(png[3 * q :], 0.2)],
                b + 10,
            ),  # fmt: skip
            "slow_body_stalls": ([(head + png[:100], 0)], b + 10),
            "slow_headers_stall": ([(head[:30], 0)], h + 10),
            "silent_connection": ([], h + 10),
        }
        names = [*kinds, "idle_keep_alive"]
        for i in range(k, 10**6):
            if time.perf_counter() >= self.deadline:
                break
            name = names[i % len(names)]
            if name == "idle_keep_alive":
                self.count(name, await self.idle_keep_alive(png))
            else:
                self.count(name, await exchange(self.port, *kinds[name]))

    async def idle_keep_alive(self, png: bytes) -> str:
        """One good request, then idle: the server closes after keep_alive_s ("closed")."""
        conn = Connection("127.0.0.1", self.port)
        try:
            r = await asyncio.wait_for(conn.post("/predict", png, "image/png"), 30)
            if r.status_code != 200:
                return f"first_request_{r.status_code}"
            got = await asyncio.wait_for(conn.reader.read(1), self.t["keep_alive_s"] + 10)
            return "closed" if got == b"" else "unexpected_bytes"
        except TimeoutError:
            return "client_timeout"
        except (OSError, asyncio.IncompleteReadError):
            return "closed"
        finally:
            await conn.close()

    async def malformed_client(self, k: int) -> None:
        names = list(self.bad)
        for i in range(k, 10**6):
            if time.perf_counter() >= self.deadline:
                break
            name = names[i % len(names)]
            self.count(name, await exchange(self.port, [(self.bad[name], 0)], 30))
            await asyncio.sleep(0.1)  # malformed traffic is a share of the load, not most of it

    def resources(self) -> tuple[float, int]:
        """(RSS in MB, open file descriptors) of the server's process tree."""
        root = psutil.Process(self.server.proc.pid)
        fds = sum(p.num_fds() for p in [root, *root.children(recursive=True)] if p.is_running())
        return self.server.rss_mb(), fds

    async def warm(self) -> None:
        """A few good requests of each kind, so that lazily opened files count as idle."""
        conn = Connection("127.0.0.1", self.port)
        try:
            for i in range(8):
                await conn.post("/predict", self.pngs[i], "image/png")
                await conn.post(OIP_PATH, self.oips[i], "application/json")
        finally:
            await conn.close()

    async def sampler(self) -> None:
        while (now := time.perf_counter()) < self.deadline:
            rss, fds = self.resources()
            self.samples.append({"t": round(now - self.t0, 1), "rss_mb": rss, "fds": fds})
            await asyncio.sleep(self.args.sample_s)

    async def run(self) -> float:
        a = self.args
        n_slow = n_bad = max(1, a.clients * 3 // 16)
        n_good = a.clients - n_slow - n_bad
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + a.minutes * 60
        tasks = [self.good_client(k) for k in range(n_good)]
        tasks += [self.slow_client(k) for k in range(n_slow)]
        tasks += [self.malformed_client(k) for k in range(n_bad)]
        print(f"{n_good} good, {n_slow} slow, {n_bad} malformed clients", file=sys.stderr)
        await asyncio.gather(self.sampler(), *tasks)
        return time.perf_counter() - self.t0


def windows(latency: list[tuple[float, float]], window_s: float, duration: float) -> list[dict]:
    n = max(1, int(duration // window_s))
    per = [[] for _ in range(n)]
    for start, seconds in latency:
        per[min(n - 1, int(start // window_s))].append(seconds)
    return [
        {"n": len(v), "p50_ms": 1e3 * _quantile(v, 0.5), "p99_ms": 1e3 * _quantile(v, 0.99)}
        for v in per
    ]


def report(soak: Soak, duration: float, fd_before: int, fd_after: int, args) -> dict:
    per = windows(soak.good_latency, args.window_s, duration)
    after = [s for s in soak.samples if s["t"] >= args.window_s] or soak.samples[-1:]
    rss0, rss1 = after[0]["rss_mb"], after[-1]["rss_mb"]
    ratio = per[-1]["p99_ms"] / per[0]["p99_ms"]
    total = sum(n for codes in soak.codes.values() for n in codes.values())
    good = sum(soak.codes.get(k, {}).get("200", 0) for k in ("good_predict", "good_oip"))
    findings = {
        kind: {c: n for c, n in codes.items() if c.startswith("5") or c == "client_timeout"}
        for kind, codes in soak.codes.items()
    }
    slow_ok = soak.codes.get("slow_body_completes", {})
    findings["slow_body_completes"] = {c: n for c, n in slow_ok.items() if c != "200"}
    log = soak.server.log.read_text(errors="replace").splitlines()
    out = {
        "quick": args.quick,
        "minutes": args.minutes,
        "clients": args.clients,
        "duration_s": round(duration, 1),
        "good_errors": soak.good_errors + soak.wrong,
        "wrong_answers": soak.wrong,
        "codes": soak.codes,
        "findings": {k: v for k, v in findings.items() if v},
        "rss_mb_after_warmup_first": rss0,
        "rss_mb_last": rss1,
        "rss_growth_pct": 100 * (rss1 / rss0 - 1),
        "rss_peak_growth_pct": 100 * (max(s["rss_mb"] for s in after) / rss0 - 1),
        "fds_idle_before": fd_before,
        "fds_idle_after": fd_after,
        "fds_under_load_min_max": [
            min(s["fds"] for s in soak.samples),
            max(s["fds"] for s in soak.samples),
        ],  # fmt: skip
        "window_s": args.window_s,
        "per_window": per,
        "p99_last_over_first": ratio,
        "req_s": total / duration,
        "good_req_s": good / duration,
        "server_log_error_lines": [ln for ln in log if "Traceback" in ln or "ERROR" in ln][:5],
        "load_average": os.getloadavg(),
        "samples": soak.samples,
    }
    out["targets"] = {
        "no_good_errors": out["good_errors"] == 0,
        "rss_growth_le_5pct": out["rss_growth_pct"] <= TARGETS["rss_growth_pct"],
        "fds_flat": fd_after - fd_before <= TARGETS["fd_growth"],
        "p99_within_20pct": abs(ratio - 1) <= TARGETS["p99_ratio_tolerance"],
    }
    return out


def idle_fds(soak: Soak, settle_s: float) -> int:
    time.sleep(settle_s)  # the load's connections closed by both ends
    return soak.resources()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="~20 s, 8 clients (a smoke test)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--window-s", type=float, default=60.0, help="latency window")
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS / fd sampling period")
    args = parser.parse_args()
    timeouts = {"header_timeout_s": 10.0, "body_timeout_s": 10.0, "keep_alive_s": 5.0}
    if args.quick:  # short server timeouts so that slow clients cycle within 20 s
        args.minutes, args.clients, args.window_s, args.sample_s = 1 / 3, 8, 5.0, 1.0
        timeouts = {"header_timeout_s": 2.0, "body_timeout_s": 2.0, "keep_alive_s": 2.0}
    overrides = [f"serve.{k}={v}" for k, v in timeouts.items()]
    with tempfile.TemporaryDirectory(prefix="soak_") as tmp:
        work = Path(tmp)
        data = make_model(MODEL, work / MODEL)
        server = Server(data["onnx"], work / "server", *QUIET, *overrides)
        try:
            server.wait_ready()
            soak = Soak(server, data, args, timeouts)
            asyncio.run(soak.warm())
            fd_before = idle_fds(soak, 1.0)
            duration = asyncio.run(soak.run())
            fd_after = idle_fds(soak, timeouts["keep_alive_s"] + 1)
            out = report(soak, duration, fd_before, fd_after, args)
        finally:
            server.stop()
    show(out)
    print(json.dumps(out))
    if not args.quick and not all(out["targets"].values()):
        sys.exit(1)


def show(out: dict) -> None:
    for i, w in enumerate(out["per_window"]):
        print(f"window {i}: n={w['n']} p50 {w['p50_ms']:.1f} ms p99 {w['p99_ms']:.1f} ms")
    print(f"codes: {out['codes']}")
    print(f"findings: {out['findings'] or 'none'}; server log errors: "
          f"{out['server_log_error_lines'] or 'none'}")  # fmt: skip
    print(f"{out['req_s']:.0f} req/s ({out['good_req_s']:.0f} good), load average "
          f"{out['load_average'][0]:.1f}")  # fmt: skip
    detail = {
        "no_good_errors": f"{out['good_errors']} errors ({out['wrong_answers']} wrong answers)",
        "rss_growth_le_5pct": f"{out['rss_mb_after_warmup_first']:.0f} -> "
        f"{out['rss_mb_last']:.0f} MB ({out['rss_growth_pct']:+.2f}%)",
        "fds_flat": f"idle {out['fds_idle_before']} -> {out['fds_idle_after']}, "
        f"under load {out['fds_under_load_min_max']}",
        "p99_within_20pct": f"last/first window p99 {out['p99_last_over_first']:.3f}",
    }
    for name, ok in out["targets"].items():
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail[name]}")


if __name__ == "__main__":
    main()
