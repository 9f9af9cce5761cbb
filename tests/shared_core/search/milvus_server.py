"""A real Milvus server for the engine tests: Milvus 2.3 standalone from PyPI's ``milvus``.

Milvus Lite runs inside the client's process and searches by brute force. This is the
server a cluster's nodes run, on one machine (embedded etcd, local storage), reached
over TCP on loopback with the same ``MilvusClient`` a user points at a cluster: its
real index (``AUTOINDEX`` builds HNSW), its segments and its consistency levels.

One server starts the first time a test asks for it and stops when the test process
exits. Each test gets a Milvus database of its own, named after its temporary folder,
so a child process the test starts finds the same collections. The server's etcd
listens on the fixed peer port 2380, so no other Milvus standalone may run on the
machine while the tests do.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

URI_VARIABLE = "CONCEPTGRAPH_TEST_MILVUS_URI"  # set once started; child processes inherit it

SERVE = """
import sys
from milvus import MilvusServer
server = MilvusServer()
server.set_base_dir(sys.argv[1])
server.start()  # waits until the server answers, or raises after 180 s
print(server.listen_port, flush=True)
server.wait()
"""


def milvus_server_uri() -> str:
    """The address of the test session's Milvus server, started on the first call."""
    if URI_VARIABLE in os.environ:
        return os.environ[URI_VARIABLE]
    folder = tempfile.mkdtemp(prefix="conceptgraph-milvus-")
    log = open(Path(folder) / "serve.log", "w", encoding="utf-8")  # noqa: SIM115
    server = subprocess.Popen([sys.executable, "-c", SERVE, folder], stdout=subprocess.PIPE,
                              stderr=log, text=True, start_new_session=True)
    atexit.register(_stop, server, folder)
    assert server.stdout is not None
    # the port, after whatever the wrapper prints; nothing if the server failed to start
    port = next((line.strip() for line in server.stdout if line.strip().isdigit()), "")
    if not port:
        raise RuntimeError("the Milvus test server did not start (is another Milvus "
                           f"standalone holding port 2380?); its errors:\n{_errors(folder)}")
    os.environ[URI_VARIABLE] = f"http://127.0.0.1:{port}"
    return os.environ[URI_VARIABLE]


def _errors(folder: str, most: int = 20) -> str:
    """The last error lines the server and its wrapper logged: the folder is removed
    when the tests end, so a failed start says what went wrong here."""
    lines: list[str] = []
    for log in sorted(Path(folder).glob("**/*.log")):
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()
        lines += [f"{log.name}: {line[:300]}" for line in text
                  if "ERROR" in line or "Error" in line or "panic" in line]
    return "\n".join(lines[-most:]) or "(none logged)"


def _stop(server: subprocess.Popen[str], folder: str, grace_s: float = 30.0) -> None:
    """Stop the server and everything it started (the wrapper, Milvus, its etcd), and
    return only once all of them have exited: Milvus outlives its wrapper by seconds,
    holding port 2380, and a test run started meanwhile could not start its own."""
    import shutil
    import time

    try:
        os.killpg(server.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            server.poll()  # reap the wrapper, or the group never empties
            os.killpg(server.pid, 0)  # raises once no process of the group is left
            time.sleep(0.1)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    except ProcessLookupError:  # the group has exited: nothing left to stop
        pass
    shutil.rmtree(folder, ignore_errors=True)


def database_client(folder: Path) -> Any:
    """A client of the server, in the database of the test that owns ``folder``
    (created on first use): tests and their children share it, other tests do not."""
    from pymilvus import MilvusClient

    uri = milvus_server_uri()
    name = "t" + hashlib.sha1(str(folder).encode()).hexdigest()[:20]
    admin = MilvusClient(uri)
    try:
        if name not in admin.list_databases():
            admin.create_database(name)
    finally:
        admin.close()
    return MilvusClient(uri, db_name=name)
