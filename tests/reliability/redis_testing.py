"""A real ``redis-server`` for tests: CI's (``JITKERN_TEST_REDIS_URL``), or one of the test's own.

Tests of faults start their own server, since they kill, fill or flush it. Without
``redis-server`` the tests fail when ``CI=true`` (CI must install it), else skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from typing import Iterator

import pytest


def require_redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        message = "redis-server is not installed (apt-get install -y redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def redis_server(folder, *options: str) -> Iterator["Server"]:
    """A fresh server on a free loopback port, with no persistence; stopped at the end."""
    port = free_port()
    process = subprocess.Popen([require_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(folder), *options],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(process, f"redis://127.0.0.1:{port}/0")
    try:
        server.wait_ready()
        yield server
    finally:
        server.kill()


class Server:
    def __init__(self, process: subprocess.Popen | None, url: str):
        self.process, self.url = process, url
        import redis

        self.client = redis.Redis.from_url(url)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def shared_redis(folder) -> Iterator[Server]:
    """CI's server when ``JITKERN_TEST_REDIS_URL`` is set (emptied first), else our own."""
    url = os.environ.get("JITKERN_TEST_REDIS_URL")
    if url:
        server = Server(None, url)
        server.client.flushdb()
        yield server
        return
    with redis_server(folder) as server:
        yield server
