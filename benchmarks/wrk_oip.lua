-- wrk (Debian's `apt-get install wrk`) posting one Open Inference Protocol infer body in a loop,
-- the independent check on benchmarks/serve_load.py's numbers (benchmarks/wrk_compare.py runs
-- both in interleaved rounds):
--
--   wrk -t2 -c16 -d20s -s benchmarks/wrk_oip.lua http://127.0.0.1:PORT -- BODY_FILE [PATH] [CONTENT_TYPE]
--
-- BODY_FILE: the request body (benchmarks/soak.py's oip_body: one normalized FP32 image as OIP
-- v2 JSON); PATH: /v2/models/simplecnn/infer unless given; CONTENT_TYPE: application/json
-- unless given. Last line: one JSON object (requests, non-2xx/3xx, socket errors, latency).

local request_bytes

function init(args)
  local file = assert(io.open(args[1] or error("usage: ... -- BODY_FILE [PATH] [CONTENT_TYPE]"), "rb"))
  local body = file:read("*a")
  file:close()
  local path = args[2] or "/v2/models/simplecnn/infer"
  local headers = { ["Content-Type"] = args[3] or "application/json" }
  request_bytes = wrk.format("POST", path, headers, body)  -- built once, sent on every request
end

function request()
  return request_bytes
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "non_2xx_3xx": %d, "socket_errors": %d, '
      .. '"p50_ms": %.3f, "p99_ms": %.3f}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
