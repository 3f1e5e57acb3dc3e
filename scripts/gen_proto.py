"""Regenerate ``src/etsim/chakra/schema/et_def_pb2.py`` from ``et_def.proto``.

Usage: ``pip install grpcio-tools && python scripts/gen_proto.py`` (also writes ``et_def_pb2.pyi``, the
type stubs that let mypy check code using the messages)

protoc's output is post-processed for two reasons, both learnt from Chakra users' bug
reports (chakra#195, astra-sim#214):

* The runtime-version check protoc inserts makes the module refuse to import under any
  protobuf runtime older than the protoc that generated it. The module only uses the
  descriptor builder API, available since protobuf 3.20, so the check is removed and
  ``pyproject.toml`` declares the range that is actually needed.
* The schema is registered in a private descriptor pool instead of the process-wide
  default one, so etsim can be imported next to Chakra's own ``et_def_pb2`` (same
  package name and file name) without a duplicate-symbol error.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "src" / "etsim" / "chakra" / "schema"


def main() -> int:
    """Run protoc and rewrite its output; return a process exit code."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{SCHEMA_DIR}",
            f"--python_out={SCHEMA_DIR}",
            f"--pyi_out={SCHEMA_DIR}",
            "et_def.proto",
        ],
        check=True,
        cwd=SCHEMA_DIR,
    )
    out = SCHEMA_DIR / "et_def_pb2.py"
    text = out.read_text()
    text = re.sub(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)\n", "", text)
    text = text.replace("from google.protobuf import runtime_version as _runtime_version\n", "")
    text = text.replace(
        "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile(",
        "_POOL = _descriptor_pool.DescriptorPool()  # private: coexists with Chakra's own module\n"
        "DESCRIPTOR = _POOL.AddSerializedFile(",
    )
    text = text.replace(
        "# NO CHECKED-IN PROTOBUF GENCODE\n",
        "# Post-processed by scripts/gen_proto.py (no runtime-version check, private pool).\n",
    )
    if "_runtime_version" in text or "_POOL" not in text:
        print("gen_proto: protoc output changed shape; update scripts/gen_proto.py", file=sys.stderr)
        return 1
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
