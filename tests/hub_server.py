"""Test helpers: write real safetensors checkpoints, and serve them like the Hugging Face Hub on 127.0.0.1.

Not a test module. :func:`serve_hub` imitates the part of the Hub that huggingface_hub 2.x uses
to read headers and small files (learned from its ``file_download.py``/``hf_api.py``):

- ``HEAD|GET /{org}/{name}/resolve/{revision}/{path}``: small ("git") files answer 200 with
  ``ETag`` (the blob id), ``X-Repo-Commit`` and ``Content-Length``; ``*.safetensors`` ("LFS")
  files answer 302 to a second server on another port (the CDN) with ``Location``,
  ``X-Linked-Etag`` and ``X-Linked-Size``, as the Hub redirects to its storage host.
  huggingface_hub then takes the file's metadata from the 302 itself (a redirect off the Hub
  origin is not followed on HEAD) while its range GETs follow the redirect to the CDN.
- ``GET /api/models/{org}/{name}/tree/{revision}``: the recursive file listing.
- Not found: 404 with ``X-Error-Code`` ``RepoNotFound``/``RevisionNotFound``/``EntryNotFound``,
  the header huggingface_hub turns into its typed errors (it ignores the body on HEAD).

Both servers honour single ``Range: bytes=a-b`` requests with 206 + ``Content-Range``, and record
every request (method, path, range, status, body bytes sent) so a test can check what was read.
Each repo has one commit, ``main``, whose sha is derived from the repo's files.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

import numpy as np
import safetensors

#: safetensors >= 0.8 takes framework dtype names in TensorSpec; the header records the short name.
_SPEC_DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
                "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16",
                "BF16": "bfloat16", "F32": "float32", "F64": "float64", "F8_E4M3": "float8_e4m3fn",
                "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64",
                "F4": "float4_e2m1fn_x2"}
#: Bits per element, to size the (zero) data written for each tensor.
_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
         "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
         "C64": 64, "F4": 4}


def _serialize(tensors: dict[str, tuple[str, tuple[int, ...]]], path: Path) -> int:
    """Write one safetensors file of zero-filled tensors; return its data bytes."""
    buffers, specs = [], {}
    for name, (dtype, shape) in tensors.items():
        nbytes = math.ceil(math.prod(shape) * _BITS[dtype] / 8)
        buffer = np.zeros(max(nbytes, 1), np.uint8)  # kept alive in `buffers` while serializing
        buffers.append(buffer)
        if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8: raw pointer + framework dtype
            # F4 is passed by its storage shape (two values per byte); TensorSpec doubles the last axis.
            storage = (*shape[:-1], shape[-1] // 2) if dtype == "F4" else shape
            specs[name] = safetensors.TensorSpec(dtype=_SPEC_DTYPES[dtype], shape=list(storage),
                                                 data_ptr=buffer.ctypes.data, data_len=nbytes)
        else:  # older releases take the header's dtype and the bytes
            specs[name] = {"dtype": dtype, "shape": list(shape), "data": buffer[:nbytes].tobytes()}
    safetensors.serialize_file(specs, str(path))
    return sum(math.ceil(math.prod(shape) * _BITS[dtype] / 8) for dtype, shape in tensors.values())


def write_checkpoint(directory: str | Path, tensors: dict[str, tuple[str, tuple[int, ...]]],
                     shards: int = 1) -> None:
    """Write ``tensors`` ({name: (safetensors dtype, shape)}, zeros) as a real checkpoint.

    ``shards == 1``: ``model.safetensors``. Otherwise ``model-0000i-of-0000n.safetensors`` holding
    consecutive runs of the tensors in the given order (sizes differ by at most one), plus
    ``model.safetensors.index.json`` as transformers writes it.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if shards == 1:
        _serialize(tensors, directory / "model.safetensors")
        return
    names = list(tensors)
    assert 1 < shards <= len(names), "each shard needs at least one tensor"
    cuts = [round(i * len(names) / shards) for i in range(shards + 1)]
    weight_map, total = {}, 0
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: tensors[name] for name in names[cuts[i]:cuts[i + 1]]}
        total += _serialize(part, directory / file)
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


@dataclass(frozen=True, slots=True)
class Served:
    """One request a server answered."""

    method: str
    path: str
    range: str | None
    status: int
    #: Body bytes sent (0 for HEAD and redirects).
    sent: int


@dataclass
class Hub:
    """What :func:`serve_hub` yields."""

    root: Path
    endpoint: str = ""
    cdn: str = ""
    #: Every request seen, by both servers, in the order answered.
    requests: list[Served] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def commit(self, repo_id: str) -> str:
        """The sha of the repo's only commit: changes whenever a file of the repo does."""
        digest = hashlib.sha1()
        for path in _files(self.root / repo_id):
            digest.update(f"{path.relative_to(self.root / repo_id).as_posix()}\0".encode())
            digest.update(hashlib.sha1(path.read_bytes()).digest())
        return digest.hexdigest()

    def bytes_sent(self, path_suffix: str) -> int:
        """Body bytes sent for request paths ending with ``path_suffix``."""
        return sum(r.sent for r in self.requests if r.path.endswith(path_suffix))

    def _record(self, served: Served) -> None:
        with self._lock:
            self.requests.append(served)


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.is_dir() else []


def _is_lfs(path: str) -> bool:
    return path.endswith(".safetensors")


class _Handler(BaseHTTPRequestHandler):
    hub: Hub  # set on the subclass each server gets
    is_cdn: bool = False

    def log_message(self, format, *args):  # keep pytest output clean
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        status, headers, payload = (self._cdn if self.is_cdn else self._hub)(path)
        sent = len(payload) if body else 0
        # recorded before the answer goes out: once the client has the bytes, a test may read the
        # log at once (recording after the write raced with it under load)
        self.hub._record(Served(self.command, path, self.headers.get("Range"), status, sent))
        self.send_response(status)
        for key, value in {"Content-Length": str(len(payload)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(payload)

    # --- the Hub origin ---
    def _hub(self, path: str) -> tuple[int, dict[str, str], bytes]:
        if match := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path):
            return self._tree(*match.groups())
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if not match:
            return 404, {}, b"no such route"
        repo_id, revision, file = match.groups()
        error = self._missing(repo_id, revision, file)
        if error:
            return error
        local = self.hub.root / repo_id / file
        commit = self.hub.commit(repo_id)
        if _is_lfs(file):
            data = local.read_bytes()
            return 302, {"Location": f"{self.hub.cdn}/{repo_id}/{file}", "X-Repo-Commit": commit,
                         "ETag": f'"{hashlib.sha1(data).hexdigest()}"',  # the LFS pointer's id on the Hub
                         "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                         "X-Linked-Size": str(len(data))}, b""
        return self._bytes(local, {"X-Repo-Commit": commit})

    def _missing(self, repo_id: str, revision: str, file: str | None):
        def not_found(code: str, extra: dict[str, str] | None = None):
            return 404, {"X-Error-Code": code, "X-Error-Message": f"{code} for {self.path}", **(extra or {})}, b""

        repo = self.hub.root / repo_id
        if not repo.is_dir():
            return not_found("RepoNotFound")
        commit = self.hub.commit(repo_id)
        if revision not in ("main", commit):
            return not_found("RevisionNotFound")
        if file is not None and not (repo / file).is_file():
            return not_found("EntryNotFound", {"X-Repo-Commit": commit})
        return None

    def _tree(self, repo_id: str, revision: str, under: str | None):
        error = self._missing(repo_id, revision, None)
        if error:
            return error
        repo = self.hub.root / repo_id
        entries = []
        for local in _files(repo / (under or "")):
            data = local.read_bytes()
            entry = {"type": "file", "path": local.relative_to(repo).as_posix(), "size": len(data),
                     "oid": hashlib.sha1(data).hexdigest()}
            if _is_lfs(local.name):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        return 200, {"Content-Type": "application/json"}, json.dumps(entries).encode()

    # --- the CDN origin: plain bytes with ranges ---
    def _cdn(self, path: str) -> tuple[int, dict[str, str], bytes]:
        local = self.hub.root / path.lstrip("/")
        if ".." in Path(path).parts or not local.is_file():
            return 404, {}, b""
        return self._bytes(local, {})

    def _bytes(self, local: Path, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        data = local.read_bytes()
        headers = {**headers, "ETag": f'"{hashlib.sha1(data).hexdigest()}"', "Accept-Ranges": "bytes"}
        asked = self.headers.get("Range")
        if asked is None:
            return 200, headers, data
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", asked.strip())
        if not match or match.groups() == ("", ""):
            return 416, {**headers, "Content-Range": f"bytes */{len(data)}"}, b""
        first, last = match.groups()
        if first == "":  # suffix range: the last N bytes
            start, stop = max(len(data) - int(last), 0), len(data) - 1
        else:
            start, stop = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
        if start >= len(data) or start > stop:
            return 416, {**headers, "Content-Range": f"bytes */{len(data)}"}, b""
        return 206, {**headers, "Content-Range": f"bytes {start}-{stop}/{len(data)}"}, data[start:stop + 1]


def _start(hub: Hub, is_cdn: bool) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"hub": hub, "is_cdn": is_cdn})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # A short poll keeps shutdown() (which waits for the next poll) from adding 0.5 s per test.
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


@contextlib.contextmanager
def serve_hub(root: str | Path) -> Iterator[Hub]:
    """Serve the repos under ``root/<org>/<name>/`` as a Hub at ``.endpoint`` (and its CDN)."""
    hub = Hub(Path(root))
    servers = [_start(hub, is_cdn=False), _start(hub, is_cdn=True)]
    hub.endpoint, hub.cdn = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    try:
        yield hub
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def confine_huggingface_hub(tmp_path: Path, monkeypatch) -> None:
    """Point huggingface_hub's cache at ``tmp_path`` and switch offline mode off for one test
    (the test's endpoint is then the only place a request can go)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache / "hub"))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # huggingface_hub reads these once, at import: patch the module's copies too.
    monkeypatch.setattr(constants, "HF_HOME", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
