"""Loopback ports for the Python tests that must know a port before a server binds it (nginx,
Prometheus): the Python side of ServerProcess::PickFreePort (tests/service/server_process.cc).

A port below the kernel's ephemeral range (net.ipv4.ip_local_port_range), free a moment ago: a
parallel test's port-0 bind or outgoing connection cannot take it before the server binds it; the
tests that pick ports hold ctest's RESOURCE_LOCK mha_picked_ports, so no two pick at once, and one
process never gets the same port twice (it may not have bound the last one yet).
"""
import os
import socket

_LOWEST = 10000
_next_port = 0


def _bind_loopback(port):
    """The port a loopback socket bound to `port` (0: the kernel's pick) had; 0 when it failed."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
        return s.getsockname()[1]


def pick_free_port():
    global _next_port
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        end = int(f.read().split()[0])
    if end - _LOWEST < 1000:
        return _bind_loopback(0)  # no room below the range: the kernel's pick
    if _next_port == 0:
        _next_port = _LOWEST + os.getpid() % (end - _LOWEST)
    for _ in range(end - _LOWEST):
        port = _next_port
        _next_port = port + 1 if port + 1 < end else _LOWEST
        if _bind_loopback(port) == port:
            return port
    return 0
