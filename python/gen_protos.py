"""Generates the task runtime's Python messages and stubs from ../proto into cohort/runtime/v1.

Run by setup.py when the package is built, and by `make python-test`; needs grpcio-tools.
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent / "proto"
FILES = ["types", "graph", "messages", "services", "local_store"]


def generate(out=HERE):
    from grpc_tools import protoc  # imported here: only building needs it
    import grpc_tools

    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    sources = [str(PROTO_ROOT / "cohort" / "runtime" / "v1" / f"{name}.proto") for name in FILES]
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}",
            f"--grpc_python_out={out}", *sources]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO_ROOT}/cohort/runtime/v1")


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
