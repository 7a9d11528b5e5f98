"""The Open Inference Protocol over gRPC (KServe v2's ``inference.GRPCInferenceService``,
Triton's gRPC API) beside HTTP: ``serve.grpc_port=PORT`` opens it (the ``grpc`` extra).

``GrpcInference`` answers on the HTTP server's event loop, for the same ``ServeApp``, what
``oip.py`` answers under ``/v2``: ``ServerLive``, ``ServerReady`` and ``ModelReady`` (false
while draining, and for a model this server does not serve), ``ServerMetadata``,
``ModelMetadata`` (as over HTTP, less the ``parameters`` the gRPC message has no field for:
the class labels are in ``ModelConfig``'s), ``ModelConfig`` and ``ModelStatistics`` (Triton's
extensions: the same dicts as over HTTP, the statistics shared with HTTP's counts), and
``ModelInfer``: one input, ``input`` (FP32, ``raw_input_contents`` or ``fp32_contents``) or
``image`` (BYTES, raw or ``bytes_contents``), checked by ``oip_tensors.py``'s checks and run
by ``OpenInference.run`` as an HTTP ``infer`` is, behind ``ServeApp.admitted``: the same
queue slots, ``serve.timeout`` and batcher; its outputs in ``raw_output_contents``, as Triton
answers.

The limits of HTTP, carried over: a message over ``serve.max_body_bytes`` is refused by gRPC
itself (``grpc.max_receive_message_length``: RESOURCE_EXHAUSTED); ``ModelInfer`` is read as a
stream so its message must arrive within ``serve.body_timeout_s`` of the call's start
(DEADLINE_EXCEEDED); a connection that does not finish the HTTP/2 handshake within
``serve.header_timeout_s`` is closed, an idle one after ``serve.keep_alive_s``; at most
``serve.max_connections`` connections and as many calls at once (RESOURCE_EXHAUSTED beyond).
A ``Reject`` becomes the gRPC status a Triton client expects (``STATUS``): INVALID_ARGUMENT
for a malformed message, tensor, shape or datatype, NOT_FOUND for an unknown model,
RESOURCE_EXHAUSTED for a full queue or an oversized request, UNAVAILABLE while draining,
DEADLINE_EXCEEDED past ``serve.timeout``; each with the same message as over HTTP.

The message classes are the ones ``tritonclient`` ships compiled (``service_pb2``,
``model_config_pb2``): imported here only, where gRPC is asked for.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import numpy as np

from lightning_cls.serve.inputs import Reject
from lightning_cls.serve.oip_tensors import (
    Request,
    checked_input,
    finite,
    from_binary,
    tensor_bytes,
)

try:
    import grpc
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from tritonclient.grpc import model_config_pb2
    from tritonclient.grpc import service_pb2 as pb
except ImportError as err:  # pragma: no cover - the grpc extra installs them
    raise ImportError(
        f"serve.grpc_port needs grpcio and tritonclient ({err}); "
        'pip install "lightning-cls[grpc]", or leave serve.grpc_port null'
    ) from err

SERVICE = "inference.GRPCInferenceService"
# A Reject's HTTP status -> the gRPC status (503: RESOURCE_EXHAUSTED, or UNAVAILABLE while
# draining: GrpcInference.abort).
STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.RESOURCE_EXHAUSTED,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


class GrpcInference:
    """The ``GRPCInferenceService`` methods of one ``ServeApp`` (``app``)."""

    def __init__(self, app):
        self.app, self.v2 = app, app.v2
        self.config = json_format.ParseDict(
            self.v2.model_config(self.v2.kind), model_config_pb2.ModelConfig()
        )

    # --- health and metadata ----------------------------------------------------------
    def server_live(self, request) -> Any:
        return pb.ServerLiveResponse(live=True)

    def server_ready(self, request) -> Any:
        return pb.ServerReadyResponse(ready=not self.app.draining)

    def model_ready(self, request) -> Any:
        try:
            self.v2.check_model(request.name, request.version or None)
        except Reject:  # a question, not an error: Triton answers false too
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=not self.app.draining)

    def server_metadata(self, request) -> Any:
        return json_format.ParseDict(self.v2.server_metadata, pb.ServerMetadataResponse())

    def model_metadata(self, request) -> Any:
        self.v2.check_model(request.name, request.version or None)
        return json_format.ParseDict(
            self.v2.metadata_dict, pb.ModelMetadataResponse(), ignore_unknown_fields=True
        )

    def model_config(self, request) -> Any:
        self.v2.check_model(request.name, request.version or None)
        return pb.ModelConfigResponse(config=self.config)

    def model_statistics(self, request) -> Any:
        if request.name:  # no name: every model's (this server's one)
            self.v2.check_model(request.name, request.version or None)
        stats = {"model_stats": [self.v2.model_stats()]}
        return json_format.ParseDict(
            stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True
        )

    # --- infer ------------------------------------------------------------------------
    async def model_infer(self, request_iterator, context) -> Any:
        """One ``ModelInfer`` call: its message within ``serve.body_timeout_s``, then
        admitted as HTTP's ``infer`` and counted in the same metrics."""
        start, status, refused = time.perf_counter(), 500, None
        try:
            raw = await self._received(context)

            async def work(deadline: float):
                return await self.v2.run(self.request_from(raw), deadline)

            head, outputs = await self.app.admitted(work)
            status = 200
        except Reject as err:
            status, refused = err.status, err
        finally:
            self.app.metrics.observe_request(status, time.perf_counter() - start)
        if refused is not None:
            await self.abort(context, refused)
        return response_from(head, outputs)

    async def _received(self, context) -> bytes:
        seconds = self.app.config.body_timeout_s
        try:
            async with asyncio.timeout(seconds):
                raw = await context.read()
        except TimeoutError:
            raise Reject(
                408, f"request message not received within serve.body_timeout_s={seconds} s"
            ) from None
        if raw is grpc.aio.EOF:
            raise Reject(400, "the call ended before its ModelInferRequest; send one")
        return raw

    def request_from(self, raw: bytes) -> Request:
        """A ``ModelInferRequest``'s bytes -> the ``Request`` HTTP's ``parse_request`` gives,
        with the same checks (a 400 naming the field at fault)."""
        message = parsed(pb.ModelInferRequest, raw)
        v2, config = self.v2, self.app.config
        v2.check_model(message.model_name, message.model_version or None)
        if len(message.inputs) != 1:
            known = " or ".join(f"'{s.name}' ({s.datatype})" for s in v2.inputs.values())
            raise Reject(400, f"send exactly one input, {known}; got {len(message.inputs)}")
        tensor = message.inputs[0]
        spec, shape = checked_input(
            tensor.name,
            tensor.datatype,
            list(tensor.shape),
            v2.inputs,
            config.max_images_per_request,
        )
        raw_contents, count = message.raw_input_contents, math.prod(shape)
        if len(raw_contents) > 1:
            raise Reject(
                400, f"{len(raw_contents)} raw_input_contents for one input; send one or none"
            )
        if raw_contents:
            data = from_binary(raw_contents[0], spec, shape)
        elif spec.datatype == "FP32":
            values = tensor.contents.fp32_contents
            if len(values) != count:
                raise Reject(
                    400,
                    f"input '{spec.name}': {len(values)} fp32_contents for shape "
                    f"{list(shape)}, which holds {count}",
                )
            data = finite(np.asarray(values, np.float32).reshape(shape), spec.name)
        else:
            data = list(tensor.contents.bytes_contents)
            if len(data) != count:
                raise Reject(
                    400,
                    f"input '{spec.name}': {len(data)} bytes_contents for shape "
                    f"{list(shape)}, which holds {count}",
                )
        outputs = {o.name: parameters(o.parameters) for o in message.outputs}
        return Request(spec.name, data, outputs, parameters(message.parameters), message.id)

    async def abort(self, context, err: Reject) -> None:
        code = STATUS.get(err.status, grpc.StatusCode.INTERNAL)
        if err.status == 503 and self.app.draining:
            code = grpc.StatusCode.UNAVAILABLE
        await context.abort(code, err.detail)

    # --- the service ------------------------------------------------------------------
    def handler(self) -> grpc.GenericRpcHandler:
        """The service's methods; any other (streaming, repository, shared memory...) is
        gRPC's own UNIMPLEMENTED."""
        unary = {
            "ServerLive": (self.server_live, pb.ServerLiveRequest),
            "ServerReady": (self.server_ready, pb.ServerReadyRequest),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest),
            "ServerMetadata": (self.server_metadata, pb.ServerMetadataRequest),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest),
            "ModelConfig": (self.model_config, pb.ModelConfigRequest),
            "ModelStatistics": (self.model_statistics, pb.ModelStatisticsRequest),
        }
        methods = {name: self._unary(*entry) for name, entry in unary.items()}
        # A stream handler for a unary call (the same on the wire): it starts when the call
        # does, so the message's arrival can be timed (serve.body_timeout_s).
        methods["ModelInfer"] = grpc.stream_unary_rpc_method_handler(
            self.model_infer, response_serializer=pb.ModelInferResponse.SerializeToString
        )
        return grpc.method_handlers_generic_handler(SERVICE, methods)

    def _unary(self, method, request_type) -> grpc.RpcMethodHandler:
        async def answer(raw: bytes, context) -> Any:
            try:
                return method(parsed(request_type, raw))
            except Reject as err:
                refused = err
            await self.abort(context, refused)

        return grpc.unary_unary_rpc_method_handler(
            answer, response_serializer=lambda message: message.SerializeToString()
        )


def parsed(message_type, raw: bytes) -> Any:
    """``raw`` as a ``message_type``; INVALID_ARGUMENT (a 400) when it is not one."""
    try:
        return message_type.FromString(raw)
    except DecodeError as err:
        raise Reject(
            400, f"the request is not a valid {message_type.DESCRIPTOR.name} ({err})"
        ) from None


def parameters(entries) -> dict:
    """A ``map<string, InferParameter>`` -> {name: its value}, as JSON ``parameters`` read."""
    values = {}
    for name, parameter in entries.items():
        which = parameter.WhichOneof("parameter_choice")
        if which is not None:
            values[name] = getattr(parameter, which)
    return values


def response_from(head: dict, outputs: list[tuple]) -> Any:
    """``OpenInference.run``'s answer -> a ``ModelInferResponse``, every output's data in
    ``raw_output_contents`` (as Triton answers; ``tritonclient``'s ``as_numpy`` reads it)."""
    response = pb.ModelInferResponse(
        model_name=head["model_name"], model_version=head["model_version"]
    )
    if head.get("id"):
        response.id = str(head["id"])
    for name, datatype, shape, data, _binary in outputs:
        response.outputs.add(name=name, datatype=datatype, shape=shape)
        response.raw_output_contents.append(tensor_bytes(datatype, data))
    return response


class GrpcServer:
    """The gRPC port of one server process, on the HTTP server's event loop."""

    def __init__(self, app, config):
        self.app, self.config = app, config
        self.server: grpc.aio.Server | None = None

    def options(self) -> list[tuple[str, int]]:
        config = self.config
        return [
            ("grpc.max_receive_message_length", config.max_body_bytes),
            ("grpc.server_handshake_timeout_ms", int(config.header_timeout_s * 1000)),
            ("grpc.max_connection_idle_ms", int(config.keep_alive_s * 1000)),
            ("grpc.max_allowed_incoming_connections", config.max_connections),
            ("grpc.so_reuseport", int(config.workers > 1)),  # workers share the port
        ]

    async def start(self) -> None:
        config = self.config
        self.server = grpc.aio.server(
            options=self.options(), maximum_concurrent_rpcs=config.max_connections
        )
        self.server.add_generic_rpc_handlers((GrpcInference(self.app).handler(),))
        host = f"[{config.host}]" if ":" in config.host else config.host
        try:
            self.server.add_insecure_port(f"{host}:{config.grpc_port}")
        except RuntimeError as err:
            raise ValueError(
                f"serve.grpc_port={config.grpc_port} on {config.host} cannot be bound ({err}); "
                "stop what uses it or choose another serve.grpc_port."
            ) from err
        await self.server.start()

    async def stop(self, grace: float) -> None:
        if self.server is not None:
            await self.server.stop(grace)
