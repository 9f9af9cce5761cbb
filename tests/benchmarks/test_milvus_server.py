"""The benchmarks' Milvus server launcher: the query node's mapped segments set in its config.

Starting the server is left to the engine tests' own (one Milvus standalone per machine,
etcd's peer port being fixed); this checks the config the launcher writes, on the real
template of the installed ``milvus`` wheel where there is one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.milvus_server import with_mapped_segments

TEMPLATE = """\
proxy:
  port: 19530
queryNode:  # the query node
  dataSync:
    flowGraph:
      maxQueueLength: 16
  enableDisk: false
indexNode:
  enableDisk: true
"""


def test_the_key_goes_under_the_query_node_and_nowhere_else(tmp_path: Path) -> None:
    lines = with_mapped_segments(TEMPLATE, tmp_path / "mmap").splitlines()
    at = lines.index("queryNode:  # the query node")
    assert lines[at + 1] == f"  mmapDirPath: {tmp_path / 'mmap'}"
    # everything else is the template's, in its order
    assert lines[:at + 1] + lines[at + 2:] == TEMPLATE.splitlines()


def test_a_template_that_is_not_milvus_23s_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="0 top-level 'queryNode:' sections"):
        with_mapped_segments("proxy:\n  port: 19530\n", tmp_path)
    with pytest.raises(ValueError, match="already sets mmapDirPath"):
        with_mapped_segments(TEMPLATE.replace("  enableDisk: false",
                                              "  mmapDirPath: /elsewhere"), tmp_path)


def test_the_installed_servers_template_takes_the_key(tmp_path: Path) -> None:
    milvus = pytest.importorskip("milvus", reason="the Milvus 2.3 server wheel (dev extra)")
    template = Path(milvus.MilvusServerConfig().template_file).read_text(encoding="utf-8")
    lines = with_mapped_segments(template, tmp_path).splitlines()
    mapped = [i for i, line in enumerate(lines) if "mmapDirPath" in line]
    assert len(mapped) == 1 and lines[mapped[0] - 1].startswith("queryNode:")
