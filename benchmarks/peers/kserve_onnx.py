"""KServe's Python model server for one ONNX classifier (``benchmarks/serve_peers.py``): a
``kserve.Model`` with ``load`` and ``predict``, started by ``kserve.ModelServer`` as KServe's
custom-model docs do, on an onnxruntime session with the project's server's settings (full graph
optimization, ``LCLS_ORT_THREADS`` intra-op threads, no spinning). KServe's Python server has no
batching of its own (KServe batches in its agent sidecar, which is not part of a local run).

    python kserve_onnx.py MODEL.onnx NAME HTTP_PORT

Runs inside KServe's own environment (``make venv-peers``), never the project's: ``kserve``
0.21's pins clash with the project's (pandas, protobuf, psutil).
"""

import os
import sys
import uuid

import numpy as np
import onnxruntime as ort
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer


class OnnxClassifier(Model):
    def __init__(self, name: str, path: str):
        super().__init__(name)
        self.path = path
        self.load()

    def load(self) -> bool:
        options = ort.SessionOptions()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = int(os.environ.get("LCLS_ORT_THREADS", "2"))
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(self.path, options, providers=["CPUExecutionProvider"])
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
