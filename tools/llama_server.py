#!/usr/bin/env python3
"""llama.cpp's own HTTP server, `llama-server`, as the rival of `gengraph serve`
(tools/bench_server.py runs both under the same load).

Build: from the llama.cpp that llama-cpp-python's sdist vendors (vendor/llama.cpp, the same
version the llama_cpp peers run), the one cmake target llama-server, CPU only, for this CPU
(GGML_NATIVE), without curl, OpenSSL or the web UI's assets (nothing is downloaded while it builds
or runs). The sdist is the peers' cached download (tools/peer_llama_cpp.py's sdist()); the binary
goes into <cache>/peers/llama-server-VERSION-HOST/bin, keyed like llama-cpp-python's own build, a
failure's reason into <that folder>.unavailable (every later use refuses with it until the file is
removed), and GENGRAPH_PEER_INSTALL=0 forbids building. The build uses CMAKE_BUILD_PARALLEL_LEVEL
jobs (default: every core); on a shared machine run it under the build lock, e.g.
    flock /tmp/gengraph-build.lock .venv/bin/python tools/llama_server.py --install

Models: the GGUF files of the llama_cpp peers (tools/peer_llama_cpp.py's gguf(), cached): the
model folder converted in float32 by llama.cpp's converter, and that file quantized to Q8_0 (or
Q4_0) by llama.cpp's quantizer. The conversion needs the llama-cpp-python build as well.

    llama_server.py --check                  exit 0 when llama-server is built (prints its path)
    llama_server.py --install                build it now (and llama-cpp-python, for the GGUF)
    llama_server.py --gguf MODEL --format f32|q8_0|q4_0   print the GGUF's path (converted once)
"""
import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_peer as ep  # noqa: E402

sys.modules.setdefault("engine_peer", ep)
import peer_llama_cpp as llama  # noqa: E402

VERSION = llama.VERSION
# CPU only, native, nothing fetched: no curl or OpenSSL (models are local files), no web UI (its
# assets would be built with npm or downloaded), no tests or examples.
CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF",
                 "-DGGML_VULKAN=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                 "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DBUILD_SHARED_LIBS=OFF"]
FORMATS = {"f32": ("float32", "float"), "f16": ("float16", "float"), "bf16": ("bfloat16", "float"),
           "q8_0": ("float32", "q8_0"), "q4_0": ("float32", "q4_0")}


def install_dir():
    return os.path.join(ep.cache_root(), f"llama-server-{VERSION}-{ep.host_key()}")


def ready(install=False):
    """The folder whose bin/llama-server is built, building it first when `install` allows."""
    return llama.installed(install_dir(), f"llama-server (llama.cpp of llama-cpp-python {VERSION})", build,
                           install, "tools/llama_server.py --install builds it")


def binary(install=False):
    return os.path.join(ready(install), "bin", "llama-server")


def build(tmp, log):
    """cmake-builds the vendored llama.cpp's llama-server into tmp/bin; the sources and the build
    tree are removed once it runs."""
    src = os.path.join(tmp, "src")
    llama.extract_vendored(src)
    build_dir = os.path.join(src, "build")
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
    llama.step(["cmake", "-S", src, "-B", build_dir] + CMAKE_OPTIONS, "configuring llama.cpp", log)
    llama.step(["cmake", "--build", build_dir, "--target", "llama-server", "-j", jobs],
               "building llama-server", log)
    os.makedirs(os.path.join(tmp, "bin"))
    built = os.path.join(build_dir, "bin", "llama-server")
    shutil.copy2(built, os.path.join(tmp, "bin", "llama-server"))
    llama.step([os.path.join(tmp, "bin", "llama-server"), "--version"], "running the built llama-server", log)
    shutil.rmtree(src)


def gguf(folder, fmt, threads=None):
    """The model folder as GGUF in `fmt` (f32, q8_0, ...): the llama_cpp peers' cached conversion."""
    if fmt not in FORMATS:
        raise ep.Refused(f"GGUF format '{fmt}' is not one of {', '.join(FORMATS)}")
    dtype, variant = FORMATS[fmt]
    path, _ = llama.gguf(llama.ready(install=True), folder, dtype, variant, threads or os.cpu_count() or 1)
    return path


def command(model_gguf, port, threads=2, slots=4, ctx_per_slot=512, alias="model", extra=()):
    """llama-server's command line: on 127.0.0.1:port, `slots` slots served by continuous
    batching, each with ctx_per_slot positions, `threads` threads for prefill and decode. On a CPU
    with AMX-INT8 the weights are not repacked (the llama_cpp peers' note on AMX buffers)."""
    argv = [binary(), "-m", model_gguf, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
            "-tb", str(threads), "-np", str(slots), "-c", str(slots * ctx_per_slot), "--cont-batching",
            "--alias", alias, "--no-webui", "--offline"]
    if llama.cpu_has_amx_int8():
        argv.append("--no-repack")
    return argv + [str(x) for x in extra]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--install", action="store_true")
    ap.add_argument("--gguf", metavar="MODEL_FOLDER")
    ap.add_argument("--format", default="f32", choices=sorted(FORMATS))
    a = ap.parse_args()
    try:
        if a.gguf:
            print(gguf(a.gguf, a.format))
        elif a.install:
            llama.ready(install=True)
            print(binary(install=True))
        else:
            print(binary(install=False))
    except ep.Refused as e:
        print(f"llama_server: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
