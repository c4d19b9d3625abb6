"""Hardening of the output folder and of ``archledger serve`` (issue 35, items 7 and 8's server).

The output folder: ``archledger site`` under a held lock ends with the one line ``build`` gives; a bad
``ARCHLEDGER_LOCK_TIMEOUT`` is one line naming the variable (exit 2, nothing written); ``--out DIR``
never deletes a user's files kept under ``DIR/results/``, ``DIR/site/`` or under a name a build
sweeps as its own leftover (refused, one line, the folder untouched), while a rebuild in an
ArchLedger output still works. The server: control bytes and undecodable bytes in the path are a
clean 400 with no traceback, nothing is served through a symbolic link inside the folder, and a
silent client's connection is closed after the timeout.

Expectations come from the issue's cases and the documented forms (engine/batch/publish.py,
site_builder/serve.py), not from the code under test.
"""
from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from engine.batch import publish
from site_builder.cli import main
from site_builder.serve import start

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its served site twice.
pytestmark = pytest.mark.xdist_group("hardening_ops")

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
BUILD = ["--grid", str(TINY), "--models", "Qwen3-8B", "--quiet", "--jobs", "1"]


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` (folders as None) with its bytes: what 'untouched' compares."""
    return {p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err.strip()


def _plant(folder: Path, rel: str, text: str = "my notes\n") -> Path:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def out(tmp_path) -> Path:
    """What an ArchLedger output holds that the lock and ownership checks look at: each target's
    manifest (the commands under test stop before reading them; one test below builds for real)."""
    out = tmp_path / "out"
    for rel in ("results/manifest.json", "results/models.parquet", "site/site-manifest.json", "site/pin.json"):
        _plant(out, rel, "{}")
    return out


@contextlib.contextmanager
def _held(out: Path):
    """``out``'s lock held by another thread (the lock is re-entrant within one thread)."""
    taken, release = threading.Event(), threading.Event()

    def hold():
        with publish.lock(out, "test holder"):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        release.set()
        thread.join()


# -- the lock -------------------------------------------------------------------------------------

def test_site_under_a_held_lock_ends_with_the_line_build_gives(out, capsys, monkeypatch):
    monkeypatch.setenv("ARCHLEDGER_LOCK_TIMEOUT", "0.2")
    with _held(out):
        before = _tree(out)
        assert main(["site", "--out", str(out), "--quiet"]) == 2
        site_lines = capsys.readouterr().err.splitlines()
        assert main(["build", "--out", str(out), *BUILD]) == 2
        build_lines = capsys.readouterr().err.splitlines()
        assert _tree(out) == before
    waiting = f"waiting for build lock held by pid {os.getpid()} (test holder, started "
    assert len(site_lines) == 2 and site_lines[0].startswith(waiting), site_lines     # no traceback
    site_line = site_lines[1]
    assert site_line.startswith(f"error: {out}/: locked by pid {os.getpid()} (test holder, started ")
    assert site_line.endswith("for more than 0.2 s — wait for it to finish or stop it")
    assert site_lines == build_lines


BAD_TIMEOUTS = ["soon", "-1", "nan", "inf", "1e300", "86401", "0x10"]


@pytest.mark.parametrize("value", BAD_TIMEOUTS)
def test_a_bad_lock_timeout_is_one_line_naming_the_variable(value, monkeypatch):
    monkeypatch.setenv("ARCHLEDGER_LOCK_TIMEOUT", value)
    with pytest.raises(publish.PublishError) as error:
        publish.lock_timeout()
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"ARCHLEDGER_LOCK_TIMEOUT={value!r}: ")
    assert "write e.g. ARCHLEDGER_LOCK_TIMEOUT=60" in text


@pytest.mark.parametrize("value, seconds", [("0", 0.0), ("2.5", 2.5), (" 30 ", 30.0), ("86400", 86400.0),
                                            ("", 1800.0), (None, 1800.0)])
def test_a_good_lock_timeout_is_its_seconds(value, seconds, monkeypatch):
    if value is None:
        monkeypatch.delenv("ARCHLEDGER_LOCK_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("ARCHLEDGER_LOCK_TIMEOUT", value)
    assert publish.lock_timeout() == seconds


@pytest.mark.parametrize("command", ["site", "build"])
@pytest.mark.parametrize("value", ["soon", "nan", "-5"])
def test_a_bad_lock_timeout_stops_the_command_before_it_writes(command, value, out, capsys, monkeypatch):
    monkeypatch.setenv("ARCHLEDGER_LOCK_TIMEOUT", value)
    before = _tree(out)
    extra = BUILD if command == "build" else ["--quiet"]
    assert main([command, "--out", str(out), *extra]) == 2
    assert _one_line(capsys).startswith(f"error: ARCHLEDGER_LOCK_TIMEOUT={value!r}: not a number of seconds")
    assert _tree(out) == before


def test_a_bad_lock_timeout_creates_no_output_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ARCHLEDGER_LOCK_TIMEOUT", "nan")
    assert main(["build", "--out", str(tmp_path / "new"), *BUILD]) == 2
    assert "ARCHLEDGER_LOCK_TIMEOUT" in _one_line(capsys)
    assert not (tmp_path / "new").exists()


# -- whose folder --out is ------------------------------------------------------------------------

# (what the user kept, the words the refusal says); each is what a publish or a sweep would delete
FOREIGN = {
    "results/": ("results/notes.txt", "results/: holds files but no manifest.json"),
    "results/ holding a models.parquet": ("results/models.parquet", "results/: holds files but no manifest.json"),
    "site/": ("site/index.html", "site/: holds files but no site-manifest.json or pin.json"),
    "a staging name": (".old-thesis.tex", "not an ArchLedger output, yet it holds '.old-thesis.tex'"),
}


@pytest.mark.parametrize("command, case", [("build", case) for case in FOREIGN] +
                         [("site", case) for case in FOREIGN if case != "a staging name"])
def test_a_folder_holding_a_users_files_is_refused_and_left_untouched(command, case, tmp_path, capsys):
    kept, said = FOREIGN[case]
    out = tmp_path / "mine"
    _plant(out, kept)
    if command == "site":           # site renders from results: give it some (the user's, or one that looks ours)
        _plant(out, "results/models.parquet", "not parquet")
        if not kept.startswith("results/"):
            _plant(out, "results/manifest.json", "{}")
    before = _tree(out)
    extra = BUILD if command == "build" else ["--quiet"]
    assert main([command, "--out", str(out), *extra]) == 2
    line = _one_line(capsys)
    assert said in line and "choose an empty or new folder for --out" in line, line
    assert _tree(out) == before


def test_an_output_folder_that_is_a_file_is_one_line(tmp_path, capsys):
    _plant(tmp_path, "out")
    assert main(["build", "--out", str(tmp_path / "out"), *BUILD]) == 2
    assert "out: not a folder" in _one_line(capsys)
    assert (tmp_path / "out").read_text() == "my notes\n"


def test_a_linked_results_folder_is_refused_and_its_target_kept(out, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    shutil.move(out / "results", elsewhere)
    (out / "results").symlink_to(elsewhere)
    before = _tree(elsewhere)
    assert main(["build", "--out", str(out), *BUILD]) == 2
    assert "results/: is not a folder ArchLedger wrote" in _one_line(capsys)
    assert _tree(elsewhere) == before and (out / "results").is_symlink()


def test_an_archledger_output_is_rebuilt_and_the_users_other_files_kept(tmp_path, capsys):
    out = tmp_path / "out"
    notes = _plant(out, "notes.txt")       # a file kept beside results/ and site/ is left alone, never refused
    assert main(["build", "--out", str(out), *BUILD]) == 0
    assert main(["build", "--out", str(out), *BUILD]) == 0         # the rebuild, in an ArchLedger output
    assert "0 models evaluated, 1 reused" in capsys.readouterr().out
    assert main(["site", "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out / 'site'} (")
    assert publish.consistent(out) and notes.read_text() == "my notes\n"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "results", "site"]


def test_an_empty_folder_and_a_first_build_killed_before_it_published_are_accepted(tmp_path):
    (tmp_path / "empty").mkdir()
    publish.claim(tmp_path / "empty")
    publish.claim(tmp_path / "absent")
    left = tmp_path / "left"             # what kill -9 before the first publication leaves
    _plant(left, publish.LOCK, '{"pid": 1, "command": "archledger build", "started": "then"}')
    _plant(left, ".results-abcd/models/x.json")
    publish.claim(left)


# -- archledger serve -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A small site with links planted inside it, served with a 1 s timeout; yields (base URL, port)."""
    root = tmp_path_factory.mktemp("served")
    site, outside = root / "site", root / "outside"
    _plant(site, "index.html", "<!doctype html>home")
    _plant(site, "models/a/index.html", "<!doctype html>model a")
    _plant(site, "data/big.bin", "x" * (32 << 20))
    _plant(outside, "secret.txt", "outside the site")
    _plant(outside, "index.html", "outside index")
    (site / "passwd").symlink_to("/etc/passwd")
    (site / "secret.txt").symlink_to(outside / "secret.txt")
    (site / "linked-dir").symlink_to(outside, target_is_directory=True)
    (site / "alias.html").symlink_to("index.html")                          # a link to a file inside
    (site / "models" / "b").mkdir()
    (site / "models" / "b" / "index.html").symlink_to(outside / "index.html")
    server, url = start(site, timeout=1.0)
    yield url, server.server_address[1]
    server.shutdown()
    server.server_close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        return conn.recv(100)


def test_serve_still_serves_the_folders_own_files(served):
    url, _ = served
    assert _get(url) == (200, b"<!doctype html>home")
    assert _get(url + "models/a/") == (200, b"<!doctype html>model a")
    assert _get(url + "models/") == (404, b"")     # a folder without index.html is not listed (Netlify lists none)


def test_serve_sends_the_netlify_headers_netlify_sends(tmp_path):
    """`archledger serve` previews what production serves: the checkout's netlify.toml [[headers]]
    (its Content-Security-Policy on every page, the Parquet media type and cache under
    /downloads/, the immutable cache under /static/), read from the file itself here."""
    import tomllib
    from site_builder.serve import load_headers
    from tests.conftest import REPO
    site = tmp_path / "site"
    (site / "downloads").mkdir(parents=True)
    (site / "static").mkdir()
    (site / "index.html").write_text("<!doctype html>home")
    (site / "downloads" / "models.parquet").write_bytes(b"PAR1")
    (site / "static" / "site.0123abcd.js").write_text("//")
    declared = tomllib.loads((REPO / "netlify.toml").read_text())["headers"]
    csp = next(r["values"]["Content-Security-Policy"] for r in declared if r["for"] == "/*")
    server, url = start(site, timeout=5.0, rules=load_headers(REPO / "netlify.toml"))
    try:
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.headers["Content-Security-Policy"] == csp
            assert page.headers["X-Content-Type-Options"] == "nosniff"
        with urllib.request.urlopen(url + "downloads/models.parquet", timeout=10) as parquet:
            assert parquet.headers.get_all("Content-Type") == ["application/vnd.apache.parquet"]   # once
            assert parquet.headers["Cache-Control"] == "public, max-age=3600, must-revalidate"
            assert parquet.headers["Content-Security-Policy"] == csp          # "/*" matches it too
        with urllib.request.urlopen(url + "static/site.0123abcd.js", timeout=10) as js:
            assert js.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("path", ["passwd", "secret.txt", "linked-dir/secret.txt", "linked-dir/", "linked-dir",
                                  "alias.html", "models/b/", "models/b/index.html", "models/%62/"])
def test_serve_follows_no_symbolic_link(path, served, capfd):
    url, _ = served
    assert _get(url + path) == (404, b"")
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("path", ["/%00", "/index.html%00", "/index.html%00.png", "/a%01b", "/%7f", "/%0a",
                                  "/%ed%a0%80", "/%ff", "/models/%00/"])
def test_serve_answers_400_to_control_and_undecodable_bytes(path, served, capfd):
    url, _ = served
    assert _get(url.rstrip("/") + path)[0] == 400
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("request_line", [b"GET /a\x00b HTTP/1.0\r\n\r\n", b"GET /\x7f HTTP/1.0\r\n\r\n"])
def test_serve_answers_400_to_raw_control_bytes(request_line, served, capfd):
    _, port = served
    assert _raw(port, request_line).startswith(b"HTTP/1.0 400 ")
    assert "Traceback" not in capfd.readouterr().err


def test_serve_closes_a_connection_that_stalls_mid_request(served, capfd):
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /index.ht")                  # half a request line, then silence
        started = time.monotonic()
        assert conn.recv(100) == b""                    # closed by the server, not by our 10 s
        assert time.monotonic() - started < 5
    assert "Traceback" not in capfd.readouterr().err


def test_serve_closes_a_connection_that_trickles_its_request(served, capfd):
    _, port = served
    trickle = b"GET /index.html HTTP/1.0\r\nX-Slow: " + b"a" * 40      # one byte per 0.25 s: never idle for 1 s
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        started, closed = time.monotonic(), False
        for byte in trickle:
            try:
                conn.sendall(bytes([byte]))
                if select.select([conn], [], [], 0.25)[0]:
                    closed = conn.recv(100) == b""      # the server closed it without an answer
            except ConnectionError:                     # or reset it under our feet
                closed = True
            if closed:
                break
        assert closed and time.monotonic() - started < 4      # the 1 s head deadline, well before the trickle ends
    assert "Traceback" not in capfd.readouterr().err


def test_serve_drops_a_client_that_stops_reading(served, capfd):
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /data/big.bin HTTP/1.0\r\n\r\n")
        time.sleep(3.0)             # the 32 MiB response fills the socket buffers (a few MiB) and stalls past 1 s
        received, started = 0, time.monotonic()
        while chunk := conn.recv(1 << 20):
            received += len(chunk)
        assert time.monotonic() - started < 5           # what was buffered, then the server's close
    assert 0 < received < 32 << 20
    assert "Traceback" not in capfd.readouterr().err
