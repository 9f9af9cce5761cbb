"""A Milvus 2.3 standalone server for the engine benchmarks, its segments optionally mapped.

    python -m benchmarks.milvus_server --data /tmp/milvus --mmap
    python -m benchmarks.scale --backend milvus --milvus-uri http://127.0.0.1:19530 \
        --engine-pid "$(pgrep -f 'milvus run standalone')" --sizes 1000000 --lean --no-exact

PyPI's ``milvus==2.3.5`` carries the server a cluster's nodes run (``pip install
milvus==2.3.5``, the ``dev`` extra). Its ``milvus-server`` command holds every loaded
segment on the query node's heap: about 3.9 KB a 384-dimensional row with HNSW (the
raw vectors, and HNSW's own copy with its links), so the 1 M scale corpus's 4.4 M rows
would take about 17 GB beside the index's own memory, more than a 24 GiB machine has.
Milvus 2.3 maps sealed segments' raw data and indexes from local files instead when the
query node's ``mmapDirPath`` is set, which is how a node whose memory is smaller than
its segments is run; ``milvus-server --extra-config`` cannot set it, since it only
replaces keys its template already has. ``--mmap`` writes that key into the template.

It prints the server's address and process id once it answers, and runs until stopped
(Ctrl+C or SIGTERM). Milvus's etcd listens on the fixed peer port 2380: stop this
server before the test suite, which starts one of its own.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import tempfile
from collections.abc import Sequence
from pathlib import Path

QUERY_NODE = re.compile(r"^queryNode:[ \t]*(#.*)?$", re.MULTILINE)


def with_mapped_segments(template: str, folder: Path) -> str:
    """``template`` (Milvus 2.3's ``milvus.yaml``) with the query node's ``mmapDirPath``
    set to ``folder``: the one key that maps sealed segments instead of loading them."""
    if re.search(r"^\s+mmapDirPath:", template, re.MULTILINE):
        raise ValueError("the Milvus config template already sets mmapDirPath")
    sections = QUERY_NODE.findall(template)
    if len(sections) != 1:
        raise ValueError(f"the Milvus config template has {len(sections)} top-level "
                         "'queryNode:' sections, not one: this is not Milvus 2.3's layout")
    return QUERY_NODE.sub(lambda m: f"{m.group(0)}\n  mmapDirPath: {folder}", template,
                          count=1)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="the server's folder: its config, logs, data and mapped files")
    parser.add_argument("--mmap", action="store_true",
                        help="map the query node's sealed segments from <data>/mmap")
    args = parser.parse_args(argv)
    try:
        from milvus import MilvusServer, MilvusServerConfig
    except ImportError as missing:
        raise SystemExit("no Milvus server here: pip install milvus==2.3.5 "
                         "(Linux x86_64)") from missing
    config = MilvusServerConfig()
    if args.mmap:
        folder = args.data.resolve()
        text = with_mapped_segments(Path(config.template_file).read_text(encoding="utf-8"),
                                    folder / "mmap")
        handle, patched = tempfile.mkstemp(suffix=".yaml", prefix="milvus-mmap-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        glog = config.glog_conf_file  # set only where the template is the wheel's own
        config = MilvusServerConfig(template=patched)
        config.glog_conf_file = glog
    server = MilvusServer(config)
    server.set_base_dir(str(args.data))
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    server.start()  # waits until the server answers, or raises after 180 s
    assert server.server_proc is not None
    print(f"http://127.0.0.1:{server.listen_port} pid {server.server_proc.pid}"
          f"{' (segments mapped)' if args.mmap else ''}", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
