"""MLServer's custom runtime for one ONNX classifier (``benchmarks/serve_peers.py``): the model
as MLServer's docs write a custom runtime (an ``MLModel`` with ``load`` and ``predict``), on an
onnxruntime session with the settings the project's server uses (full graph optimization, one
intra-op pool of ``LCLS_ORT_THREADS`` threads, no spinning).

Runs inside MLServer's own environment (``make venv-peers``), never the project's: MLServer
1.7.1's pins clash with the project's. ``mlserver start <folder>`` loads it from the
``model-settings.json`` that ``serve_peers.py`` writes beside the model (``implementation``:
``mlserver_onnx.OnnxClassifier``, ``parameters.uri``: the ``.onnx`` file, and MLServer's adaptive
batching: ``max_batch_size``, ``max_batch_time``).
"""

import os

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


def session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = int(os.environ.get("LCLS_ORT_THREADS", "2"))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


class OnnxClassifier(MLModel):
    async def load(self) -> bool:
        self.session = session(self.settings.parameters.uri)
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32, copy=False)
        (logits,) = self.session.run([self.output_name], {self.input_name: x})
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output("logits", logits)],
        )
