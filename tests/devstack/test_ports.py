"""Ports handed to servers that bind them later are outside the kernel's ephemeral range."""

from __future__ import annotations

import socket

from headwater_dev.devstack import ports
from headwater_dev.devstack.ports import free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable():
    first_ephemeral = ports._first_ephemeral()
    picked = [free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked), "a port was handed out twice"
    assert all(20000 <= port < first_ephemeral for port in picked), picked
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", picked[-1]))


def test_a_port_in_use_is_never_handed_out(monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        busy = holder.getsockname()[1]
        holder.listen()
        monkeypatch.setattr(ports, "_LOWEST", busy)
        monkeypatch.setattr(ports, "_HIGHEST", busy + 1)
        monkeypatch.setattr(ports, "_first_ephemeral", lambda: 65535)
        handed = {free_port() for _ in range(5)}
        assert busy not in handed
