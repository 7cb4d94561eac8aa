"""The listen addresses of the settings: one parser for every server and check."""

from __future__ import annotations

import pytest

from extender.settings import GrpcSettings, ServerSettings, Settings, listen_address


@pytest.mark.parametrize("text, address", [
    ("127.0.0.1:8888", ("127.0.0.1", 8888)),
    ("0.0.0.0:0", ("0.0.0.0", 0)),  # a server asks for any free port (tests do)
    ("[::1]:8889", ("::1", 8889)),
    ("localhost:65535", ("localhost", 65535)),
])
def test_listen_address(text, address):
    assert listen_address(text) == address


@pytest.mark.parametrize("text", ["", "8888", ":8888", "host:", "host:http", "host:65536", "host:-1"])
def test_listen_address_refuses(text):
    with pytest.raises(ValueError, match="not HOST:PORT"):
        listen_address(text)


def test_configured_addresses_need_a_port_of_their_own():
    settings = Settings(server=ServerSettings(listen="127.0.0.1:0", metrics_listen="[::]:x"),
                        grpc=GrpcSettings(listen="nohost"))
    assert [p for p in settings.validate() if "HOST:PORT" in p] == [
        "server.listen must be HOST:PORT, got '127.0.0.1:0'",
        "server.metrics_listen must be HOST:PORT or empty, got '[::]:x'",
        "grpc.listen must be HOST:PORT or empty, got 'nohost'",
    ]
    assert Settings(server=ServerSettings(metrics_listen=""), grpc=GrpcSettings(listen="")).validate() == []
