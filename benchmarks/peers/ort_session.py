"""The onnxruntime session both serving peers (``mlserver_onnx.py``, ``kserve_onnx.py``) run
their model on: the settings of the project's server (``inference/runtimes.make_session``) with
its defaults: full graph optimization, one intra-op pool of ``LCLS_ORT_THREADS`` threads (set by
``benchmarks/serve_peers.py`` to the machine's cores), no spinning. Imported from the peers' own
environments, so it needs only onnxruntime."""

import os

import onnxruntime as ort


def session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = int(os.environ.get("LCLS_ORT_THREADS", "2"))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
