"""Requests decoded inside the handler, so undecodable bytes get INVALID_ARGUMENT.

grpcio decodes a request with the handler's ``request_deserializer`` before (or, for a
stream, while) the handler runs, outside its code: a DecodeError there answers UNKNOWN and
logs a traceback, once per call. Ingest's own methods take bytes and decode them where
they can answer in-band; the servicers of libraries (health, reflection) do not. They are
registered through :class:`DecodingRegistrar`, which moves their decoding into the
handler: a frame that is not the method's request ends the call with INVALID_ARGUMENT,
quietly.

At registration, not in a server interceptor: with any interceptor, grpc.aio runs the
interceptor chain (coroutines, a partial, the lookup through them) on every call, ingest's
own single-message calls too (issue 40).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc


class DecodingRegistrar:
    """Registers a library's handlers on ``server``, each decoding its requests itself.

    Takes the two registration calls that generated ``add_*Servicer_to_server`` functions
    make; pass it in place of the server.
    """

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        """Register generic handlers whose methods decode in the handler."""
        self._server.add_generic_rpc_handlers([_DecodingHandler(h) for h in handlers])

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        """Register a service's method handlers, each decoding in the handler."""
        self._server.add_registered_method_handlers(
            service, {name: decoding(h) for name, h in handlers.items()}
        )


class _DecodingHandler(grpc.GenericRpcHandler):
    """A generic handler whose methods decode in the handler (each wrapped once)."""

    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self._inner = inner
        #: Only methods the inner handler serves: a caller's unknown names are not kept.
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        """The inner handler's handler of the method, decoding its requests itself."""
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None
            wrapped = self._wrapped[method] = decoding(handler)
        return wrapped


def decoding(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """The same handler, taking bytes and decoding them itself (as is if it takes bytes)."""
    if handler.request_deserializer is None:
        return handler
    return _decoding(handler)


async def _decode(decode: Callable[[bytes], Any], raw: bytes, context: Any) -> Any:
    try:
        return decode(raw)
    except Exception as exc:  # DecodeError, or what a library's deserializer raises
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the request is not the method's request message ({type(exc).__name__})",
        )


async def _decoded(decode: Callable[[bytes], Any], raws: Any, context: Any) -> AsyncIterator[Any]:
    async for raw in raws:
        yield await _decode(decode, raw, context)


def _decoding(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """The same handler, taking bytes and decoding them itself."""
    decode = handler.request_deserializer
    serialize = handler.response_serializer
    if handler.unary_unary is not None:
        unary_unary = handler.unary_unary

        async def uu(raw: bytes, context: Any) -> Any:
            return await unary_unary(await _decode(decode, raw, context), context)

        return grpc.unary_unary_rpc_method_handler(uu, None, serialize)
    if handler.stream_unary is not None:
        stream_unary = handler.stream_unary

        async def su(raws: Any, context: Any) -> Any:
            return await stream_unary(_decoded(decode, raws, context), context)

        return grpc.stream_unary_rpc_method_handler(su, None, serialize)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(handler.unary_stream, lambda raw, c: _decode(decode, raw, c)),
            None,
            serialize,
        )

    async def requests(raws: Any, context: Any) -> Any:
        return _decoded(decode, raws, context)

    return grpc.stream_stream_rpc_method_handler(
        _streaming(handler.stream_stream, requests), None, serialize
    )


def _streaming(behavior: Callable[..., Any], request: Callable[..., Awaitable[Any]]) -> Any:
    """A response-streaming behavior of the same form (async generator or coroutine)."""
    if inspect.isasyncgenfunction(behavior):

        async def generator(raw: Any, context: Any) -> AsyncIterator[Any]:
            async for response in behavior(await request(raw, context), context):
                yield response

        return generator

    async def writer(raw: Any, context: Any) -> Any:  # writes with context.write
        return await behavior(await request(raw, context), context)

    return writer
