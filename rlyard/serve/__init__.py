"""`rlyard serve`: an OpenAI-compatible server over an rlyard engine, with session recording."""
from rlyard.serve.server import RlyardServer, serve
from rlyard.serve.sessions import Session

__all__ = ["RlyardServer", "Session", "serve"]
