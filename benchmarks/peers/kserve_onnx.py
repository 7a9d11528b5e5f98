"""KServe's Python model server for one ONNX classifier (``benchmarks/serve_peers.py``): a
``kserve.Model`` with ``load`` and ``predict``, started by ``kserve.ModelServer`` as KServe's
custom-model docs do, on an onnxruntime session with the project's server's settings (full graph
optimization, ``LCLS_ORT_THREADS`` intra-op threads, no spinning: ``ort_session.py``). KServe's Python server has no
batching of its own (KServe batches in its agent sidecar, which is not part of a local run).

    python kserve_onnx.py MODEL.onnx NAME HTTP_PORT

Runs inside KServe's own environment (``make venv-peers``), never the project's: ``kserve``
0.21's pins clash with the project's (pandas, protobuf, psutil).
"""

import sys
import uuid

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
from ort_session import session  # benchmarks/peers/, this script's folder


class OnnxClassifier(Model):
    def __init__(self, name: str, path: str):
        super().__init__(name)
        self.path = path
        self.load()

    def load(self) -> bool:
        self.session = session(self.path)
        self.input_name = self.session.get_inputs()[0].name
        self.ready = True
        return self.ready

    def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        x = payload.inputs[0].as_numpy().astype(np.float32, copy=False)
        (logits,) = self.session.run(None, {self.input_name: x})
        out = InferOutput(name="logits", shape=list(logits.shape), datatype="FP32")
        out.set_data_from_numpy(logits, binary_data=False)
        return InferResponse(
            model_name=self.name, infer_outputs=[out], response_id=payload.id or str(uuid.uuid4())
        )


if __name__ == "__main__":
    path, name, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ModelServer(http_port=port, enable_grpc=False, workers=1).start([OnnxClassifier(name, path)])
