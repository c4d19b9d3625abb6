"""``archledger serve``: a local preview of build/site on 127.0.0.1 (never on other interfaces).

Layer: site_builder. The standard library's threaded HTTP server with the MIME types the site
needs (Parquet, JSON); what Netlify serves in production is the same folder (netlify.toml).

What it refuses, whatever arrives: a path holding a control character (NUL included) or a code
point no file name can hold is 400; a path reaching through a symbolic link anywhere inside the
served folder (a linked file, a linked folder, a linked index.html) is 404, so only the folder's own
regular files are served; a connection that sends or reads nothing for :data:`TIMEOUT` seconds is
closed. None of these, nor a client that leaves mid-response, logs a traceback.
"""
from __future__ import annotations

import errno
import functools
import http.server
import os
import stat
import sys
import threading
import urllib.parse
from http import HTTPStatus
from pathlib import Path

#: Seconds a connection may stay silent (no byte of its request arrives, no byte of the response is
#: taken) before it is closed: a slow or stalled client holds a thread and a socket no longer.
TIMEOUT = 20.0


def _bad_name(path: str) -> bool:
    """The URL path holds a control character or a lone surrogate."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in path)


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".parquet": "application/vnd.apache.parquet", ".json": "application/json",
                      ".js": "text/javascript", ".csv": "text/csv", ".svg": "image/svg+xml"}
    timeout = TIMEOUT          # socketserver.StreamRequestHandler sets it on the socket (reads and writes)

    def __init__(self, *args, timeout: float | None = None, **kwargs):
        if timeout is not None:
            self.timeout = timeout
        super().__init__(*args, **kwargs)

    def log_message(self, format, *args):  # quiet: one line per request is noise in tests
        pass

    def send_head(self):
        """The standard library's, once the path is known to name the served folder's own files."""
        raw = self.path.split("?", 1)[0].split("#", 1)[0]
        # surrogateescape: bytes that are no UTF-8 (an encoded surrogate included) decode to lone
        # surrogates, which no file name on this system can hold (open() would raise, not 404)
        if _bad_name(raw) or _bad_name(urllib.parse.unquote(raw, errors="surrogateescape")):
            self.send_error(HTTPStatus.BAD_REQUEST, "Bad path")
            return None
        if self._through_link(self.translate_path(self.path)):
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        return super().send_head()

    def _through_link(self, path: str) -> bool:
        """True if reaching ``path`` (a translate_path result, inside the served folder) passes a
        symbolic link: any component below the served folder, or the index.html that a folder
        would serve. (Checked with lstat before the standard library opens the file: whoever could
        swap a file for a link in between can already rewrite the folder's files.)"""
        root = os.path.abspath(self.directory)
        relative = os.path.relpath(os.path.abspath(path), root)
        current = root
        for part in [] if relative == "." else relative.split(os.sep):
            current = os.path.join(current, part)
            try:
                mode = os.lstat(current).st_mode
            except (OSError, ValueError):
                return False            # absent: the standard library answers 404 itself
            if stat.S_ISLNK(mode):
                return True
        if os.path.isdir(current):
            return any(os.path.islink(os.path.join(current, index)) for index in ("index.html", "index.htm"))
        return False


class Server(http.server.ThreadingHTTPServer):
    # a deploy page's throughput/interactivity chart fetches every config file of its model at once
    # (DeepSeek-V3: 41), and a test's playwright route.fetch is not held to a browser's six
    # connections per host: past the standard library's listen backlog of 5, a connection waits
    # for TCP to retransmit its handshake (a second or more)
    request_queue_size = 128

    def handle_error(self, request, client_address):
        """A client that left, reset or stalled past the timeout is no error of the server's: no
        traceback (the standard library prints one for any exception); anything else still is."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def start(site: Path, port: int = 0, timeout: float = TIMEOUT) -> tuple[Server, str]:
    """Serve ``site`` in a background thread; returns the server and its base URL. ``timeout``:
    seconds a connection may stay silent before it is closed."""
    handler = functools.partial(Handler, directory=str(site), timeout=timeout)
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
