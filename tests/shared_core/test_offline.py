import socket

import pytest
from pytest_socket import SocketBlockedError


@pytest.mark.filterwarnings("ignore:A test tried to use socket")
@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_network_is_blocked_in_every_test(family: socket.AddressFamily) -> None:
    # pyproject's addopts run the whole suite with --disable-socket: opening an
    # internet socket fails, so nothing can reach a network by accident
    with pytest.raises(SocketBlockedError):
        socket.socket(family, socket.SOCK_STREAM)
