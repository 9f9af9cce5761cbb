import socket

import pytest


def test_network_is_blocked_in_tests() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(RuntimeError, match="offline"):
            sock.connect(("127.0.0.1", 9))
    finally:
        sock.close()
