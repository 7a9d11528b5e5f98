"""LitServe with nothing to do: the request rate LitServe's own path (HTTP process, request
queue, inference worker, response transport) allows on this machine, with no image decoding
and no model. ``serve_load.py`` measures it beside the servers, as the ceiling for anything
built on LitServe here.

``python benchmarks/litserve_echo.py <port> <max_batch_size> <batch_timeout>``
"""

import sys

import litserve as ls


class EchoAPI(ls.LitAPI):
    def setup(self, device):
        pass

    def decode_request(self, request):
        return request["n"]

    def batch(self, inputs):
        return list(inputs)

    def predict(self, x):
        return x

    def unbatch(self, output):
        return output

    def encode_response(self, output):
        return {"n": output}


if __name__ == "__main__":
    port, max_batch_size, batch_timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    api = EchoAPI(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", timeout=10, fast_queue=True)
    server.run(port=port, host="127.0.0.1", log_level="error", generate_client_file=False)
