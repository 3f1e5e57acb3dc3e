"""JSON dumps of Chakra ET files, as ``chakra_jsonizer`` writes them.

The jsonizer writes protobuf's canonical JSON of the GlobalMetadata and of every Node back to
back, indent 2, with no separator and no enclosing array (so the whole file is not valid
JSON). :func:`jsonize` reproduces that byte for byte; ``array=True`` writes a valid JSON array
of the same objects instead.
"""

from __future__ import annotations

import os

from google.protobuf import json_format

from etsim.chakra.io import iter_frames, read_bytes
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import TraceError

__all__ = ["jsonize"]


def jsonize(path: str | os.PathLike[str], *, array: bool = False) -> str:
    """The JSON text of a trace file (see the module docstring)."""
    data = read_bytes(path)
    objects: list[str] = []
    for index, payload in enumerate(iter_frames(data, path)):
        message = pb.GlobalMetadata() if index == 0 else pb.Node()
        try:
            message.ParseFromString(payload)
        except Exception as exc:  # protobuf raises DecodeError (and, in some backends, others)
            raise TraceError(f"{path}: frame {index} is not a {type(message).__name__} message: {exc}") from None
        objects.append(json_format.MessageToJson(message, indent=2))
    if not objects:
        raise TraceError(f"{path}: empty file (a trace starts with a GlobalMetadata frame)")
    if array:
        body = ",\n".join("  " + o.replace("\n", "\n  ") for o in objects)
        return "[\n" + body + "\n]\n"
    return "".join(objects)
