"""`rlyard serve`: an OpenAI-compatible server over an rlyard engine, with session recording."""
from rlyard.serve.app import HttpServer, serve
from rlyard.serve.server import RlyardServer
from rlyard.serve.sessions import Session

__all__ = ["HttpServer", "RlyardServer", "Session", "serve"]
