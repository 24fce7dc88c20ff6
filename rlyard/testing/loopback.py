"""A real ASGI app served on 127.0.0.1 in a thread, for tests that need an HTTP peer (a judge, an
OpenAI-compatible endpoint). The socket is bound before the server starts, so the port cannot be
taken in between."""
from __future__ import annotations

import socket
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
