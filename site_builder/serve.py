"""``archledger serve``: a local preview of build/site on 127.0.0.1 (never on other interfaces).

Layer: site_builder. The standard library's threaded HTTP server with the MIME types the site
needs (Parquet, JSON); what Netlify serves in production is the same folder (netlify.toml).
``archledger serve`` sends the ``[[headers]]`` of the checkout's netlify.toml as Netlify does (every
rule whose ``for`` pattern matches the path, in file order: the Content-Security-Policy, the cache
and Parquet media-type headers), and, as Netlify, lists no folder (a folder without index.html is
404), so the preview is what production serves.

What it refuses, whatever arrives: a path holding a control character (NUL included) or a code
point no file name can hold is 400; a path reaching through a symbolic link anywhere inside the
served folder (a linked file, a linked folder, a linked index.html) is 404, so only the folder's own
regular files are served. A connection whose request head has not arrived whole :data:`TIMEOUT`
seconds after it connected (silent, or trickling a byte now and then) is closed, and so is one that
takes nothing of the response for :data:`TIMEOUT` seconds. None of these, nor a client that leaves
mid-response, logs a traceback.
"""
from __future__ import annotations

import errno
import functools
import http.server
import io
import os
import re
import stat
import sys
import threading
import time
import tomllib
import urllib.parse
from http import HTTPStatus
from pathlib import Path

#: Seconds a client has to send its whole request head, and then may leave each part of the
#: response untaken, before its connection is closed: a slow, stalled or trickling client holds a
#: thread and a socket no longer.
TIMEOUT = 20.0


class _HeadReader(io.RawIOBase):
    """The socket's reading side with a deadline: every read may wait only for the time left, so a
    client sending a byte now and then cannot stretch its request head past the deadline (a plain
    socket timeout bounds each wait alone). Past it: TimeoutError, which the standard library's
    request loop answers by closing the connection. One deadline per connection is one per request:
    the server speaks HTTP/1.0, so it closes every connection after its response."""

    def __init__(self, sock, seconds: float):
        super().__init__()
        self.sock, self.deadline = sock, time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request head not received in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


def load_headers(netlify_toml: Path) -> list[tuple[re.Pattern, dict[str, str]]]:
    """netlify.toml's ``[[headers]]`` as (path pattern, headers) in file order; none when the file
    is absent. Netlify's ``*`` matches any characters, ``/`` included (``/*`` is every path)."""
    if not netlify_toml.is_file():
        return []
    rules = []
    for rule in tomllib.loads(netlify_toml.read_text()).get("headers", []):
        pattern = "^" + ".*".join(re.escape(part) for part in str(rule["for"]).split("*")) + "$"
        rules.append((re.compile(pattern), {str(k): str(v) for k, v in rule.get("values", {}).items()}))
    return rules


def headers_for(rules: list[tuple[re.Pattern, dict[str, str]]], path: str) -> dict[str, str]:
    """The headers Netlify sends for URL ``path``: every matching rule's, a later rule's value
    replacing an earlier one's of the same name."""
    out: dict[str, str] = {}
    for pattern, values in rules:
        if pattern.match(path):
            out.update(values)
    return out


def _bad_name(path: str) -> bool:
    """The URL path holds a control character or a lone surrogate."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in path)


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".parquet": "application/vnd.apache.parquet", ".json": "application/json",
                      ".js": "text/javascript", ".csv": "text/csv", ".svg": "image/svg+xml"}
    timeout = TIMEOUT          # the request head's deadline, then each send's (see setup, parse_request)
    rules: list = []           # netlify.toml's [[headers]] (load_headers); none: the standard library's alone

    def __init__(self, *args, timeout: float | None = None, rules: list | None = None, **kwargs):
        if timeout is not None:
            self.timeout = timeout
        if rules is not None:
            self.rules = rules
        super().__init__(*args, **kwargs)

    def _rule_headers(self) -> dict[str, str]:
        return headers_for(self.rules, urllib.parse.urlsplit(self.path).path) if self.rules else {}

    def send_header(self, keyword, value):
        """A header a rule sets is sent once, with the rule's value (Netlify's custom headers
        replace the server's own, e.g. Content-Type)."""
        if keyword.lower() not in {k.lower() for k in self._rule_headers()}:
            super().send_header(keyword, value)

    def end_headers(self):
        for name, value in self._rule_headers().items():
            super().send_header(name, value)
        super().end_headers()

    def list_directory(self, path):
        """No listing (Netlify lists none): a folder without index.html is 404."""
        self.send_error(HTTPStatus.NOT_FOUND, "File not found")
        return None

    def setup(self):
        super().setup()
        self.rfile.close()                     # (the socket's own reader: it would hold the socket open)
        self.rfile = io.BufferedReader(_HeadReader(self.connection, self.timeout))

    def parse_request(self) -> bool:
        try:
            return super().parse_request()     # the rest of the head: headers, under the same deadline
        finally:
            self.connection.settimeout(self.timeout)     # the response: each send may wait the timeout

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


def start(site: Path, port: int = 0, timeout: float = TIMEOUT, rules: list | None = None) -> tuple[Server, str]:
    """Serve ``site`` in a background thread; returns the server and its base URL. ``timeout``:
    seconds a connection may stay silent before it is closed; ``rules``: :func:`load_headers`' to send."""
    handler = functools.partial(Handler, directory=str(site), timeout=timeout, rules=rules)
    server = Server(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def serve(site: Path, port: int, netlify_toml: Path | None = None) -> int:
    if not (site / "index.html").exists():
        print(f"error: {site}: no site — run `archledger build` first", file=sys.stderr)
        return 2
    try:
        server, url = start(site, port, rules=load_headers(netlify_toml) if netlify_toml else None)
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
