"""Media types (``content_type``) parsed and compared as RFC 9110, section 8.3.1, says.

``type/subtype`` is case-insensitive and names the format; parameters (``; charset=utf-8``)
are not part of the format's identity but are handed to the normalizer (``charset`` is
honoured when text is decoded). A string that is not a media type is a
:class:`MediaTypeError`, so the dead letter says *why* instead of "unknown format".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from headwater.enricher.errors import EnricherError

# RFC 9110 5.6.2: token = 1*tchar.
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_ESSENCE = re.compile(rf"({_TOKEN})/({_TOKEN})")
# One parameter after its ";": name "=" (token / quoted-string), RFC 9110 5.6.4 and 5.6.6.
_PARAM = re.compile(rf'[ \t]*({_TOKEN})=({_TOKEN}|"(?:[^"\\]|\\.)*")[ \t]*')
_QUOTED_PAIR = re.compile(r"\\(.)")

#: Parsed media types by their exact string: the fleet sends few distinct ones, so the hot
#: path is one dict lookup. Bounded, because the strings come from devices. A string that is
#: not a media type is kept as its error *text*: one exception object raised again and again
#: grows its traceback by the frames of each raise, and those frames pin the payloads.
_CACHE: dict[str, MediaType | str] = {}
_CACHE_MAX = 1024
#: Longest content type parsed (and cached) at all; real ones are a few dozen characters.
MAX_LEN = 512


class MediaTypeError(EnricherError, ValueError):
    """A ``content_type`` that is not a media type by RFC 9110's grammar."""


@dataclass(frozen=True)
class MediaType:
    """A parsed media type: ``essence`` identifies the format, ``params`` go along."""

    type: str
    subtype: str
    #: Parameter names in lower case (they are case-insensitive); values as sent, unquoted.
    params: dict[str, str] = field(default_factory=dict)

    @property
    def essence(self) -> str:
        """Return ``type/subtype`` in lower case: the registry key."""
        return f"{self.type}/{self.subtype}"

    @property
    def charset(self) -> str | None:
        """Return the ``charset`` parameter in lower case, or None when not given."""
        value = self.params.get("charset")
        return value.lower() if value is not None else None


def parse(text: str) -> MediaType:
    """Parse ``text`` as a media type.

    Args:
        text: a ``Content-Type`` value such as ``application/vnd.x+json; charset=UTF-8``.

    Returns:
        The media type, with type and subtype in lower case.

    Raises:
        MediaTypeError: ``text`` does not follow RFC 9110's grammar (the message says where).
    """
    cached = _CACHE.get(text)
    if cached is None:
        if len(text) > MAX_LEN:
            raise MediaTypeError(f"{text[:40]!r}... is longer than {MAX_LEN} characters")
        try:
            cached = _parse(text)
        except MediaTypeError as exc:
            cached = str(exc)
        if len(_CACHE) < _CACHE_MAX:
            _CACHE[text] = cached
    if isinstance(cached, str):
        raise MediaTypeError(cached)
    return cached


def _parse(text: str) -> MediaType:
    head, _, rest = text.partition(";")
    # RFC 9110 allows no whitespace inside type/subtype; around the whole value is OWS.
    essence = _ESSENCE.fullmatch(head.strip(" \t"))
    if essence is None:
        raise MediaTypeError(f"{text!r} is not a media type: expected type/subtype, got {head!r}")
    params: dict[str, str] = {}
    if rest:
        for part in rest.split(";") if '"' not in rest else _split_quoted(rest):
            if not part.strip(" \t"):
                continue  # "parameters = *( OWS ";" OWS [ parameter ] )": empty ones are fine
            p = _PARAM.fullmatch(part)
            if p is None:
                raise MediaTypeError(f"{text!r}: malformed parameter {part.strip()!r}")
            value = p.group(2)
            if value.startswith('"'):
                value = _QUOTED_PAIR.sub(r"\1", value[1:-1])
            # The first occurrence wins; a repeated parameter is ambiguous, so reject it.
            name = p.group(1).lower()
            if name in params:
                raise MediaTypeError(f"{text!r}: parameter {name!r} given twice")
            params[name] = value
    return MediaType(essence.group(1).lower(), essence.group(2).lower(), params)


def _split_quoted(rest: str) -> list[str]:
    """Split parameters on ";" outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for ch in rest:
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == ";" and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts
