"""Safetensors checkpoint headers (names, dtypes, shapes, bytes) from a directory or the Hub, no weights.

Layer: engine.verify. A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``) and the
data section. Reading the header says what a checkpoint stores without reading the weights:
:func:`read_local` opens the files, :func:`read_hub` lets ``huggingface_hub`` fetch only the
header bytes with HTTP range requests.

Invariants of every :class:`HeaderScan`, whatever its source (one checker serves both):
- each tensor's ``nbytes`` equals its element count times its dtype's width (packed sub-byte
  dtypes round the total up to whole bytes); an unknown dtype is an error, never a guess;
- in each file the tensors' data offsets tile ``[0, data section)`` without gaps or overlaps,
  so ``total_bytes`` is both the sum of ``nbytes`` and the sum of the files' data sections;
- with an index, the index and the shard headers name exactly the same tensors, shard for
  shard; a tensor stored in two files is an error.
Every failure is a :class:`HeaderError` whose message is one line naming the file or repo.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.language.dtypes import DTYPE_BITS

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
#: safetensors refuses headers above 100 MB; a larger length means a corrupt or non-safetensors file.
MAX_HEADER_BYTES = 100_000_000


class HeaderError(ValueError):
    """A checkpoint's headers can't be read or disagree. ``str()`` is one line:
    ``<file or repo>: problem — hint``."""

    def __init__(self, where: str, problem: str, hint: str = ""):
        self.where, self.problem, self.hint = where, problem, hint
        message = f"{where}: {problem}" + (f" — {hint}" if hint else "")
        super().__init__(" ".join(message.split()))  # upstream messages may carry newlines


@dataclass(frozen=True, slots=True)
class HeaderTensor:
    """One tensor as its file's header declares it."""

    name: str
    #: safetensors dtype string (BF16, F8_E4M3, F4, ...).
    dtype: str
    shape: tuple[int, ...]
    #: ``data_offsets[1] - data_offsets[0]``; checked against the shape and the dtype's width.
    nbytes: int
    #: The shard file's name (a basename).
    file: str


@dataclass(frozen=True, slots=True)
class HeaderScan:
    """Every tensor of a checkpoint, from its headers only."""

    #: Sorted by name.
    tensors: tuple[HeaderTensor, ...]
    #: Sum of the files' data sections, equal to the sum of ``nbytes`` (offsets tile each file).
    total_bytes: int
    #: Shard file names, sorted.
    files: tuple[str, ...]
    #: ``dir:<path>`` or ``hub:<repo_id>@<commit sha, else the revision asked for>``.
    source: str


# --- checks shared by both sources ---------------------------------------------------------

def _expected_nbytes(where: str, name: str, dtype: Any, shape: tuple[int, ...]) -> int:
    bits = DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
    if bits is None:
        raise HeaderError(where, f"tensor {name!r} has unknown dtype {dtype!r}",
                          f"known dtypes: {', '.join(sorted(DTYPE_BITS))}")
    # Packed formats (F4, F6_*) store several elements per byte; the last byte may be partial.
    return math.ceil(math.prod(shape) * bits / 8)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _file_tensors(where: str, file: str, header: Any, data_bytes: int | None) -> list[HeaderTensor]:
    """The tensors of one file's decoded header, checked; ``data_bytes`` is the data section's
    size when known (a local file), and then the offsets must end exactly there."""
    if not isinstance(header, dict):
        raise HeaderError(where, "header is not a JSON object", "not a safetensors file?")
    tensors, spans = [], []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not (isinstance(entry, dict) and isinstance(entry.get("shape"), list)
                and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2):
            raise HeaderError(where, f"tensor {name!r} lacks dtype/shape/data_offsets",
                              "the header is malformed; re-save the checkpoint")
        shape, (begin, end) = entry["shape"], entry["data_offsets"]
        if not (all(map(_is_count, shape)) and _is_count(begin) and _is_count(end) and begin <= end):
            raise HeaderError(where, f"tensor {name!r} has shape {shape} or data_offsets {[begin, end]} "
                              "that are not non-negative integers with begin <= end")
        shape = tuple(shape)
        expected = _expected_nbytes(where, name, entry.get("dtype"), shape)
        if end - begin != expected:
            raise HeaderError(where, f"tensor {name!r} ({entry['dtype']} {list(shape)}) spans "
                              f"{end - begin} bytes, its shape needs {expected}",
                              "the header is inconsistent; re-save the checkpoint")
        tensors.append(HeaderTensor(name, entry["dtype"], shape, end - begin, file))
        spans.append((begin, end, name))
    # Offsets must tile the data section, as safetensors itself requires when loading; so no byte
    # is counted twice and none is left out of total_bytes.
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise HeaderError(where, f"tensor {name!r} starts at byte {begin}, expected {position} "
                              "(data_offsets overlap or leave a gap)")
        position = end
    if data_bytes is not None and position != data_bytes:
        raise HeaderError(where, f"data_offsets end at byte {position} but the data section has "
                          f"{data_bytes} bytes", "the file is truncated or not a safetensors file")
    return tensors


def _scan(per_file: dict[str, list[HeaderTensor]], weight_map: dict[str, str] | None,
          where: str, source: str) -> HeaderScan:
    """Join checked files into a scan; with ``weight_map`` the index must match the headers."""
    owner: dict[str, str] = {}
    for file, tensors in per_file.items():
        for tensor in tensors:
            if tensor.name in owner:
                raise HeaderError(where, f"tensor {tensor.name!r} is stored in both "
                                  f"{owner[tensor.name]} and {file}", "remove the stale shard")
            owner[tensor.name] = file
    if weight_map is not None:
        for name, file in sorted(weight_map.items()):
            if owner.get(name) != file:
                found = f"found in {owner[name]}" if name in owner else "found in no shard"
                raise HeaderError(f"{where}/{INDEX_FILE}", f"names tensor {name!r} in {file}, {found}",
                                  "the index and the shards disagree; re-save or re-download")
        for name in sorted(owner.keys() - weight_map.keys()):
            raise HeaderError(f"{where}/{owner[name]}", f"holds tensor {name!r} that {INDEX_FILE} "
                              "does not name", "the index and the shards disagree; re-save or re-download")
    tensors = sorted((t for ts in per_file.values() for t in ts), key=lambda t: t.name)
    return HeaderScan(tuple(tensors), sum(t.nbytes for t in tensors), tuple(sorted(per_file)), source)


def _shard_names(where: str, weight_map: Any) -> list[str]:
    """The index's shard files; names must be plain basenames (they are joined to a directory)."""
    if not (isinstance(weight_map, dict) and weight_map
            and all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items())):
        raise HeaderError(where, "weight_map is missing, empty or not {tensor: file}",
                          "the index is malformed; use the shards without it")
    files = sorted(set(weight_map.values()))
    for file in files:
        if Path(file).name != file or file in ("", ".", ".."):
            raise HeaderError(where, f"weight_map names {file!r}, not a file beside the index")
    return files


# --- local directory ---------------------------------------------------------------------

def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of repeated keys silently; a repeated tensor name is corruption.
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        raise ValueError(f"repeated keys {repeated}")
    return dict(pairs)


def _load_json(where: str, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError) as error:
        raise HeaderError(where, f"is not valid JSON ({error})", "the file is corrupt or truncated") from None


def _read_file(path: Path) -> list[HeaderTensor]:
    where = str(path)
    try:
        with path.open("rb") as handle:
            size = path.stat().st_size
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise HeaderError(where, f"has {len(prefix)} bytes, fewer than the 8-byte header length",
                                  "the file is truncated")
            (length,) = struct.unpack("<Q", prefix)
            if length > min(size - 8, MAX_HEADER_BYTES):
                raise HeaderError(where, f"declares a {length}-byte header but has {size} bytes",
                                  "the file is truncated or not a safetensors file")
            header = _load_json(where, handle.read(length))
    except OSError as error:
        raise HeaderError(where, f"cannot be read ({error.strerror or error})") from None
    return _file_tensors(where, path.name, header, size - 8 - length)


def read_local(path: str | Path) -> HeaderScan:
    """The headers of the checkpoint in directory ``path`` (or of one ``.safetensors`` file).

    With ``model.safetensors.index.json`` its weight_map decides the shards (stray
    ``*.safetensors`` beside them, e.g. a consolidated copy, are ignored); without it every
    ``*.safetensors`` in the directory is a shard.
    """
    path = Path(path)
    source = f"dir:{path}"
    if path.is_file():
        return _scan({path.name: _read_file(path)}, None, str(path.parent), source)
    if not path.is_dir():
        raise HeaderError(str(path), "is not a directory or file", "check the path")
    index = path / INDEX_FILE
    if index.is_file():
        try:
            loaded = _load_json(str(index), index.read_bytes())
        except OSError as error:
            raise HeaderError(str(index), f"cannot be read ({error.strerror or error})") from None
        weight_map = loaded.get("weight_map") if isinstance(loaded, dict) else None
        files = _shard_names(str(index), weight_map)
        missing = [file for file in files if not (path / file).is_file()]
        if missing:
            raise HeaderError(str(index), f"names shard {missing[0]} that is not in {path}",
                              "download every shard the index lists")
    else:
        weight_map, files = None, sorted(p.name for p in path.glob("*.safetensors") if p.is_file())
        if not files:
            raise HeaderError(str(path), "holds no *.safetensors file and no " + INDEX_FILE,
                              "point at the folder with the weights (a .bin-only checkpoint is not read)")
    return _scan({file: _read_file(path / file) for file in files}, weight_map, str(path), source)


# --- Hugging Face Hub --------------------------------------------------------------------

def _hub_failures() -> tuple[type[Exception], ...]:
    """What huggingface_hub raises for a missing repo/file, a bad header or a dead network.

    Imported on use so that importing the engine doesn't import huggingface_hub.
    """
    from huggingface_hub.errors import NotASafetensorsRepoError, SafetensorsParsingError

    try:  # huggingface_hub >= 2 speaks HTTP through httpx2, whose transport errors are not OSErrors
        from httpx2 import TransportError
    except ImportError:  # older releases use requests (OSErrors) or httpx
        TransportError = OSError
    # HfHubHTTPError and OfflineModeIsEnabled are OSErrors; HFValidationError (bad repo id) a ValueError.
    return (OSError, ValueError, TransportError, NotASafetensorsRepoError, SafetensorsParsingError)


@contextlib.contextmanager
def _quiet_retries():
    """huggingface_hub logs each retry of a failed request as a warning (five, over about 23 s,
    before it gives up): the command's answer is its own one line, so they are not shown."""
    from huggingface_hub.utils import logging as hub_logging   # configures its logger on first import

    level = hub_logging.get_verbosity()
    hub_logging.set_verbosity(logging.ERROR)
    try:
        yield
    finally:
        hub_logging.set_verbosity(level)


def _api(endpoint: str | None, token: str | None):
    from huggingface_hub import HfApi

    # With another endpoint, never send the token saved for huggingface.co (token=None would).
    return HfApi(endpoint=endpoint, token=False if endpoint and token is None else token)


def _unreachable(error: BaseException) -> bool:
    """Whether ``error`` means the Hub could not be reached at all (no network, a name that does
    not resolve, a refused connection, a timeout), as opposed to an answer from it. huggingface_hub
    raises the transport error itself, or (downloads) a LocalEntryNotFoundError, "not in the local
    cache", whose cause is the transport error: either way the cause chain holds it."""
    import importlib
    import socket
    from huggingface_hub.errors import OfflineModeIsEnabled

    network = [ConnectionError, TimeoutError, socket.gaierror]
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests.exceptions", "ConnectionError"), ("requests.exceptions", "Timeout")):
        try:
            network.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass
    seen: BaseException | None = error
    for _ in range(16):            # a cause chain is short; a cycle must not loop forever
        if seen is None or isinstance(seen, OfflineModeIsEnabled):
            return False
        if isinstance(seen, tuple(network)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _hub_error(where: str, error: Exception) -> HeaderError:
    """The HeaderError for a huggingface_hub failure, with what to do about it."""
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, OfflineModeIsEnabled,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    if isinstance(error, LocalEntryNotFoundError) and constants.HF_HUB_OFFLINE:
        error = OfflineModeIsEnabled(str(error))    # offline mode: a file not cached is not "not in the repo"
    if _unreachable(error):       # before EntryNotFoundError: "not in the cache" is its subclass
        return HeaderError(where, "cannot reach the Hub (no network?)",
                           "check the connection (or --endpoint / HF_ENDPOINT); offline, record the evidence from "
                           "a local checkpoint (--checkpoint DIR) or the transformers code (--config FILE --meta)")
    if isinstance(error, GatedRepoError):
        return HeaderError(where, "the repo is gated", "accept its license on the Hub and pass a token")
    if isinstance(error, RepositoryNotFoundError):
        return HeaderError(where, "repository not found (or private)",
                           "check the repo id, pass a token, or use a local directory")
    if isinstance(error, RevisionNotFoundError):
        return HeaderError(where, "revision not found", "pass --revision with an existing branch, tag or commit")
    if isinstance(error, EntryNotFoundError):
        # Name the file: a shard the index lists but the repo lacks fails here, not at the index.
        response = getattr(error, "response", None)
        url = str(getattr(response, "url", "") or "")
        missing = url.rsplit("/", 1)[-1] if "/resolve/" in url else "the file"
        return HeaderError(where, f"{missing} not found in the repo", "check the file name / pass --revision")
    if isinstance(error, OfflineModeIsEnabled):
        return HeaderError(where, "HF_HUB_OFFLINE is set", "unset it or use a local directory")
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return HeaderError(where, f"{type(error).__name__}: {first_line}",
                       "check the repo id / pass --revision / use a local directory")


def _pinned_commit(api, repo_id: str, revision: str | None) -> str | None:
    """The commit the revision points at, read from the weights file's HEAD (``X-Repo-Commit``);
    ``None`` if the endpoint doesn't say. Reading every shard at this commit keeps the scan
    consistent if the branch moves meanwhile."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError

    for filename in (SINGLE_FILE, INDEX_FILE):  # the order huggingface_hub itself tries
        url = hf_hub_url(repo_id, filename, revision=revision, endpoint=api.endpoint)
        try:
            return api.get_hf_file_metadata(url=url).commit_hash
        except EntryNotFoundError:
            continue
    raise HeaderError(f"hub:{repo_id}@{revision or 'main'}", f"has neither {SINGLE_FILE} nor {INDEX_FILE}",
                      "the weights may be .bin only or in a subfolder; use a local directory")


def read_hub(repo_id: str, revision: str | None = None, *, endpoint: str | None = None,
             token: str | None = None) -> HeaderScan:
    """The headers of a Hub checkpoint, fetched with range requests (the weights are not downloaded).

    ``endpoint`` replaces huggingface.co (a mirror, or a test server); the token saved for
    huggingface.co is then not sent unless passed as ``token``.
    """
    api = _api(endpoint, token)
    where = f"hub:{repo_id}@{revision or 'main'}"
    try:
        with _quiet_retries():
            commit = _pinned_commit(api, repo_id, revision)
            pinned = commit or revision
            where = f"hub:{repo_id}@{pinned or 'main'}"
            metadata = api.get_safetensors_metadata(repo_id, revision=pinned)
    except HeaderError:
        raise
    except _hub_failures() as error:
        raise _hub_error(where, error) from None
    weight_map = metadata.weight_map if metadata.sharded else None
    if weight_map is not None:
        _shard_names(f"{where}/{INDEX_FILE}", weight_map)
    per_file = {}
    for file, file_metadata in metadata.files_metadata.items():
        # Back to the header's own form so the local checks apply unchanged; the data section's
        # size is unknown here, so only the tiling of the offsets from 0 is checked.
        header = {name: {"dtype": info.dtype, "shape": list(info.shape), "data_offsets": list(info.data_offsets)}
                  for name, info in file_metadata.tensors.items()}
        per_file[file] = _file_tensors(f"{where}/{file}", file, header, None)
    return _scan(per_file, weight_map, where, where)


def hub_file_text(repo_id: str, filename: str, revision: str | None = None, *,
                  endpoint: str | None = None, token: str | None = None) -> str:
    """One text file of a Hub repo (config.json, modeling_*.py), through huggingface_hub's cache."""
    where = f"hub:{repo_id}@{revision or 'main'}/{filename}"
    try:
        with _quiet_retries():
            path = _api(endpoint, token).hf_hub_download(repo_id, filename, revision=revision)
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HeaderError(where, "is not UTF-8 text") from None
    except _hub_failures() as error:
        raise _hub_error(where, error) from None


def hub_file_names(repo_id: str, revision: str | None = None, *, endpoint: str | None = None,
                   token: str | None = None) -> tuple[str, ...]:
    """Every file path of a Hub repo at ``revision``, sorted (one tree listing, no downloads)."""
    where = f"hub:{repo_id}@{revision or 'main'}"
    try:
        with _quiet_retries():
            return tuple(sorted(_api(endpoint, token).list_repo_files(repo_id, revision=revision)))
    except _hub_failures() as error:
        raise _hub_error(where, error) from None
