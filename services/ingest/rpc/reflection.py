"""gRPC server reflection, v1 and v1alpha, that can describe every service it lists.

Two traps this module closes:

* grpcio's reflection answers from a descriptor pool, but lists whatever names it is
  given. A service whose generated ``*_pb2`` module the process never imported is listed
  and then answered NOT_FOUND (``buf curl``, ``grpcurl`` and Postman fail to describe it).
  Callers therefore pass service *descriptors*: holding one means its file, and every
  file it imports, is in the default pool.
* grpcio-reflection ships only ``grpc.reflection.v1alpha``; current tools ask for
  ``grpc.reflection.v1`` first. The v1 protocol is the v1alpha one under a new package
  (same messages, same field numbers), so the same servicer answers both, and a v1 file
  descriptor derived from the v1alpha one makes the v1 service describable too.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import ServiceDescriptor
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from headwater.ingest.rpc.decoding import DecodingRegistrar

V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"


def _v1_file() -> descriptor_pb2.FileDescriptorProto:
    """Return the v1 reflection file: the v1alpha one, renamed to the v1 package."""
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    old = f".{file.package}."
    file.name, file.package = V1_FILE_NAME, V1_PACKAGE
    file.options.Clear()  # v1alpha's options say deprecated and name v1alpha's packages
    for message in file.message_type:
        for fld in message.field:
            if fld.type_name:  # assigning "" to a scalar's type_name would mark it set
                fld.type_name = fld.type_name.replace(old, f".{V1_PACKAGE}.")
    for service in file.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, f".{V1_PACKAGE}.")
            method.output_type = method.output_type.replace(old, f".{V1_PACKAGE}.")
    return file


def _register_v1_file(pool: descriptor_pool.DescriptorPool) -> None:
    """Add the v1 reflection file to ``pool`` once (a later grpcio may already have it)."""
    try:
        pool.FindFileByName(V1_FILE_NAME)
    except KeyError:
        pool.AddSerializedFile(_v1_file().SerializeToString())


def enable_reflection(server: grpc.aio.Server, services: Iterable[ServiceDescriptor]) -> None:
    """Serve reflection (v1 and v1alpha) for ``services`` and the reflection services.

    Args:
        server: the not yet started aio server.
        services: descriptors of the services the server exposes (for example
            ``ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"]``).
    """
    pool = descriptor_pool.Default()
    _register_v1_file(pool)
    names = [service.full_name for service in services]
    names += [V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME]
    servicer = reflection.aio.ReflectionServicer(names, pool=pool)
    # Both decode their requests in the handler (decoding.py). v1alpha through grpcio's
    # generated registration; v1 through a generic handler with the same (wire-identical)
    # message classes.
    registrar = DecodingRegistrar(server)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, registrar)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    registrar.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": v1})]
    )
