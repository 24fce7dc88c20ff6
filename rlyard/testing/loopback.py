"""A real ASGI app served on 127.0.0.1 in a thread, for tests that need an HTTP peer (a judge, an
OpenAI-compatible endpoint). The socket is bound before the server starts, so the port cannot be
taken in between. Also: reading a server subprocess's output up to the line with its URL."""
from __future__ import annotations

import os
import select
import socket
import subprocess
import threading
import time


def serve_in_thread(app) -> tuple["uvicorn.Server", int]:  # noqa: F821
    """(the running uvicorn server, its port); stop it with `server.should_exit = True`."""
    import uvicorn

    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, sock.getsockname()[1]


def read_until(proc: subprocess.Popen, marker: str, timeout_s: float | None = None) -> str:
    """What `proc` printed on its stdout pipe up to `marker`, its exit, or the timeout (None: no
    timeout). Bytes straight off the pipe's fd: readline on the file object would buffer lines that
    select() then never reports, so a URL line arriving in one chunk with the lines before it was
    missed (a 60 s wait and a failed test, seen)."""
    printed, deadline = b"", None if timeout_s is None else time.monotonic() + timeout_s
    while marker.encode() not in printed and (deadline is None or time.monotonic() < deadline):
        if select.select([proc.stdout], [], [], 0.5)[0]:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            printed += chunk
    return printed.decode(errors="replace")
