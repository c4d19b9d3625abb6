"""``archledger serve``: a local preview of build/site on 127.0.0.1 (never on other interfaces).

Layer: site_builder. The standard library's threaded HTTP server with the MIME types the site
needs (Parquet, JSON); what Netlify serves in production is the same folder (netlify.toml).
"""
from __future__ import annotations

import errno
import functools
import http.server
import sys
import threading
from pathlib import Path


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".parquet": "application/vnd.apache.parquet", ".json": "application/json",
                      ".js": "text/javascript", ".csv": "text/csv", ".svg": "image/svg+xml"}

    def log_message(self, format, *args):  # quiet: one line per request is noise in tests
        pass


class Server(http.server.ThreadingHTTPServer):
    # a deploy page's throughput/interactivity chart fetches every config file of its model at once
    # (DeepSeek-V3: 41), and a test's playwright route.fetch is not held to a browser's six
    # connections per host: past the standard library's listen backlog of 5, a connection waits
    # for TCP to retransmit its handshake (a second or more)
    request_queue_size = 128


def start(site: Path, port: int = 0) -> tuple[Server, str]:
    """Serve ``site`` in a background thread; returns the server and its base URL."""
    handler = functools.partial(Handler, directory=str(site))
    server = Server(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def serve(site: Path, port: int) -> int:
    if not (site / "index.html").exists():
        print(f"error: {site}: no site — run `archledger build` first", file=sys.stderr)
        return 2
    try:
        server, url = start(site, port)
    except OSError as exc:
        reason = "port already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        print(f"error: 127.0.0.1:{port}: cannot serve ({reason}) — pass --port N for another port "
              "(--port 0 picks a free one)", file=sys.stderr)
        return 2
    print(f"serving {site} at {url} (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0
