"""MLServer's custom runtime for one ONNX classifier (``benchmarks/serve_peers.py``): the model
as MLServer's docs write a custom runtime (an ``MLModel`` with ``load`` and ``predict``), on an
onnxruntime session with the settings the project's server uses (``ort_session.py``).

Runs inside MLServer's own environment (``make venv-peers``), never the project's: MLServer
1.7.1's pins clash with the project's. ``mlserver start <folder>`` loads it, with
benchmarks/peers/ on its PYTHONPATH, from the ``model-settings.json`` that ``serve_peers.py``
writes (``implementation``: ``mlserver_onnx.OnnxClassifier``, ``parameters.uri``: the ``.onnx``
file, and MLServer's adaptive batching: ``max_batch_size``, ``max_batch_time``).
"""

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from ort_session import session  # benchmarks/peers/, on MLServer's PYTHONPATH


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
