"""Build glue: compiles the Cython hot path and generates the gRPC stubs from proto/.

The stubs are generated at build time (never committed), so they cannot drift from the proto.
"""
import os
import shutil
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
PROTO_ROOT = ROOT / "proto"
PROTO_FILES = sorted(PROTO_ROOT.rglob("*.proto"))


class BuildPyWithStubs(build_py):
    """Runs grpc_tools.protoc into the build tree and ships the .proto beside the stubs."""

    def run(self):
        super().run()
        from grpc_tools import protoc
        import grpc_tools

        # proto/contextsvc/v1/*.proto lands as the subpackage contextsvc.v1, so the generated
        # "from contextsvc.v1 import context_pb2" resolves inside this package.
        out = Path(self.build_lib)
        well_known = Path(grpc_tools.__file__).parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            *[str(p) for p in PROTO_FILES],
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + ", ".join(map(str, PROTO_FILES)))
        (out / "contextsvc" / "v1" / "__init__.py").write_text('"""Generated protobuf and gRPC stubs."""\n')
        shipped = Path(self.build_lib) / "contextsvc" / "proto"
        for p in PROTO_FILES:
            dest = shipped / p.relative_to(PROTO_ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)


extensions = []
if os.environ.get("CONTEXTSVC_NO_EXTENSIONS") != "1":
    extensions = cythonize(
        [
            Extension(
                "contextsvc._native_c",
                ["_native/hotpath.pyx"],
                include_dirs=["_native"],
                depends=["_native/jsonscan.h", "_native/wirescan.pxi"],
                extra_compile_args=["-O3", "-ffp-contract=off"],  # sums as the Python twin rounds them
            )
        ],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )

setup(ext_modules=extensions, cmdclass={"build_py": BuildPyWithStubs})
