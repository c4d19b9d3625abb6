"""engine.verify.checkpoint_headers: headers read from real safetensors files, locally and through a local Hub.

The Hub tests talk to tests.hub_server on 127.0.0.1 only: huggingface_hub's cache is a tmp dir,
offline mode is off, and a request hook fails the test on any other host.
"""
from __future__ import annotations

import dataclasses
import json
import math
import struct
from pathlib import Path

import pytest

from engine.verify.checkpoint_headers import HeaderError, hub_file_names, hub_file_text, read_hub, read_local
from tests.hub_server import confine_huggingface_hub, serve_hub, write_checkpoint

#: Bits per element, written out here independently of the engine's table.
BITS = {"BF16": 16, "F32": 32, "F8_E4M3": 8, "I64": 64, "U8": 8, "F4": 4}
#: In shard order: each of three shards gets a tensor over 100 kB, the size huggingface_hub
#: fetches in its first range request, so "no full shard was downloaded" is a real check.
TENSORS = {
    "model.embed_tokens.weight": ("BF16", (1024, 128)),
    "model.layers.0.input_layernorm.weight": ("F32", (128,)),
    "model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", (512, 256)),
    "model.layers.0.self_attn.q_proj.weight_scale_inv": ("F32", (4, 2)),
    "model.layers.0.mlp.experts.down_proj_blocks": ("F4", (256, 1024)),
    "model.layers.0.mlp.router.counts": ("I64", (1, 64)),
    "lm_head.weight": ("BF16", (1024, 128)),
    "model.norm.flags": ("U8", (3,)),
}
CONFIG = '{"model_type": "llama", "hidden_size": 128}\n'


def data_section(path: Path) -> int:
    """A safetensors file's data bytes, from its size and its 8-byte header length."""
    with path.open("rb") as handle:
        (header_length,) = struct.unpack("<Q", handle.read(8))
    return path.stat().st_size - 8 - header_length


def raw_file(path: Path, header: object, data_bytes: int = 0, header_bytes: bytes | None = None) -> Path:
    """A hand-made .safetensors file (for headers the safetensors package refuses to write)."""
    text = header_bytes if header_bytes is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data_bytes))
    return path


def without_source(scan):
    return dataclasses.replace(scan, source="")


@pytest.mark.parametrize("shards", [1, 3])
def test_local_scan_is_what_was_written(tmp_path, shards):
    write_checkpoint(tmp_path, TENSORS, shards=shards)
    scan = read_local(tmp_path)

    assert [t.name for t in scan.tensors] == sorted(TENSORS)
    for tensor in scan.tensors:
        dtype, shape = TENSORS[tensor.name]
        assert (tensor.dtype, tensor.shape) == (dtype, shape)
        assert tensor.nbytes == math.ceil(math.prod(shape) * BITS[dtype] / 8)
    files = sorted(tmp_path.glob("*.safetensors"))
    assert scan.files == tuple(p.name for p in files)
    assert scan.total_bytes == sum(data_section(p) for p in files)
    assert scan.source == f"dir:{tmp_path}"
    if shards == 1:
        assert scan.files == ("model.safetensors",)
        assert {t.file for t in scan.tensors} == {"model.safetensors"}
    else:
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert scan.files == tuple(f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3))
        assert {t.name: t.file for t in scan.tensors} == index["weight_map"]
        assert scan.total_bytes == index["metadata"]["total_size"]


def test_local_reads_one_file_and_ignores_shards_outside_the_index(tmp_path):
    write_checkpoint(tmp_path, TENSORS, shards=3)
    # A consolidated copy beside the shards (as some repos ship) is not part of the indexed checkpoint.
    write_checkpoint(tmp_path / "consolidated", {"other": ("BF16", (2, 2))})
    (tmp_path / "consolidated" / "model.safetensors").rename(tmp_path / "consolidated.safetensors")
    assert len(read_local(tmp_path).tensors) == len(TENSORS)

    single = read_local(tmp_path / "consolidated.safetensors")
    assert [(t.name, t.nbytes, t.file) for t in single.tensors] == [("other", 8, "consolidated.safetensors")]


# --- the Hub, served locally ---------------------------------------------------------------

@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A Hub on 127.0.0.1 serving ``org/single`` (one file), ``org/sharded`` (three shards +
    index), ``org/configs`` (no weights); huggingface_hub confined to it and to tmp_path."""
    import huggingface_hub

    confine_huggingface_hub(tmp_path, monkeypatch)

    root = tmp_path / "repos"
    write_checkpoint(root / "org" / "single", TENSORS)
    write_checkpoint(root / "org" / "sharded", TENSORS, shards=3)
    for repo in ("single", "sharded", "configs"):
        (root / "org" / repo).mkdir(parents=True, exist_ok=True)
        (root / "org" / repo / "config.json").write_text(CONFIG)

    with serve_hub(root) as server:
        allowed = {server.endpoint, server.cdn}

        def only_local(request):
            origin = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
            if origin not in allowed:
                raise AssertionError(f"request left the test Hub: {request.url}")

        hooks = huggingface_hub.get_session().event_hooks["request"]
        hooks.append(only_local)
        try:
            yield server
        finally:
            hooks.remove(only_local)


@pytest.mark.parametrize("repo", ["org/single", "org/sharded"])
def test_hub_scan_equals_local_and_reads_headers_only(hub, repo):
    scan = read_hub(repo, endpoint=hub.endpoint)

    assert without_source(scan) == without_source(read_local(hub.root / repo))
    commit = hub.commit(repo)
    assert scan.source == f"hub:{repo}@{commit}"
    reads = [r for r in hub.requests if r.method == "GET" and r.path.endswith(".safetensors")]
    assert reads and all(r.range for r in reads), "headers are read with range requests"
    # Every shard after the first HEAD is read at the commit the branch pointed to.
    assert all(f"/resolve/{commit}/" in r.path for r in reads if "/resolve/" in r.path)
    for file in scan.files:
        size = (hub.root / repo / file).stat().st_size
        assert 0 < hub.bytes_sent(f"{repo}/{file}") < size, f"{file}: more than its header was sent"


def test_hub_reads_a_header_larger_than_the_first_range(hub):
    # ~150 kB of header: huggingface_hub's first 100 kB range can't hold it and it asks again.
    many = {f"model.layers.{i}.mlp.experts.{i}.gate_proj.weight": ("BF16", (4, 4)) for i in range(2000)}
    write_checkpoint(hub.root / "org" / "wide", many)
    assert (hub.root / "org" / "wide" / "model.safetensors").stat().st_size > 100_008

    scan = read_hub("org/wide", endpoint=hub.endpoint)
    assert without_source(scan) == without_source(read_local(hub.root / "org" / "wide"))
    assert any(r.range and r.range.startswith("bytes=8-") for r in hub.requests)


def test_hub_revision_pins_and_unknown_revision_fails(hub):
    commit = hub.commit("org/single")
    assert read_hub("org/single", commit, endpoint=hub.endpoint).source == f"hub:org/single@{commit}"
    with pytest.raises(HeaderError, match=r"^hub:org/single@v9: revision not found"):
        read_hub("org/single", "v9", endpoint=hub.endpoint)


def test_hub_files(hub, tmp_path):
    assert hub_file_text("org/sharded", "config.json", endpoint=hub.endpoint) == CONFIG
    cached = list((tmp_path / "hf" / "hub" / "models--org--sharded").rglob("config.json"))
    assert cached, "config.json went into huggingface_hub's cache under tmp_path"
    assert hub_file_names("org/configs", endpoint=hub.endpoint) == ("config.json",)
    assert "model-00002-of-00003.safetensors" in hub_file_names("org/sharded", endpoint=hub.endpoint)


@pytest.mark.parametrize("call, match", [
    (lambda h: read_hub("org/missing", endpoint=h.endpoint), r"^hub:org/missing@main: repository not found"),
    (lambda h: read_hub("org/configs", endpoint=h.endpoint), r"^hub:org/configs@main: has neither model\.safetensors"),
    (lambda h: hub_file_text("org/single", "nope.json", endpoint=h.endpoint), r"^hub:org/single@main/nope\.json: nope\.json not found"),
    (lambda h: hub_file_names("org/missing", endpoint=h.endpoint), r"^hub:org/missing@main: repository not found"),
])
def test_hub_errors_name_the_repo(hub, call, match):
    with pytest.raises(HeaderError, match=match) as caught:
        call(hub)
    assert "\n" not in str(caught.value)


def test_hub_shard_missing_from_the_repo_names_the_file(hub):
    (hub.root / "org" / "sharded" / "model-00003-of-00003.safetensors").unlink()
    with pytest.raises(HeaderError, match=r"^hub:org/sharded@\w{40}: model-00003-of-00003\.safetensors not found"):
        read_hub("org/sharded", endpoint=hub.endpoint)


def test_hub_corrupt_shard_header_names_the_file(hub):
    shard = hub.root / "org" / "sharded" / "model-00002-of-00003.safetensors"
    raw_file(shard, None, header_bytes=b'{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}')
    with pytest.raises(HeaderError, match="model-00002-of-00003.safetensors") as caught:
        read_hub("org/sharded", endpoint=hub.endpoint)
    assert "\n" not in str(caught.value)


# --- malformed local checkpoints -------------------------------------------------------------

def _truncated_header(d: Path):
    path = d / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b'{"w": {')
    return path.name


def _bad_json(d: Path):
    return raw_file(d / "model.safetensors", None, 4, header_bytes=b'{"w": {"dtype": "BF16",,}}').name


def _unknown_dtype(d: Path):
    return raw_file(d / "model.safetensors", {"w": {"dtype": "Q3_K", "shape": [2], "data_offsets": [0, 2]}}, 2).name


def _wrong_nbytes(d: Path):
    return raw_file(d / "model.safetensors", {"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 4]}}, 4).name


def _offsets_past_the_end(d: Path):
    write_checkpoint(d, TENSORS)
    path = d / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-10])  # lose the end of the data section
    return path.name


def _overlapping_offsets(d: Path):
    header = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
              "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}
    return raw_file(d / "model.safetensors", header, 6).name


def _repeated_tensor_name(d: Path):
    entry = b'{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'
    return raw_file(d / "model.safetensors", None, 1, header_bytes=b'{"w": ' + entry + b', "w": ' + entry + b"}").name


def _index_names_missing_tensor(d: Path):
    write_checkpoint(d, TENSORS, shards=3)
    index_path = d / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["model.ghost.weight"] = "model-00001-of-00003.safetensors"
    index_path.write_text(json.dumps(index))
    return "model.ghost.weight"


def _shard_holds_unindexed_tensor(d: Path):
    write_checkpoint(d, TENSORS, shards=3)
    index_path = d / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    del index["weight_map"]["lm_head.weight"]
    index_path.write_text(json.dumps(index))
    return "model-00003-of-00003.safetensors"


def _tensor_in_two_files(d: Path):
    write_checkpoint(d, {"w": ("BF16", (2,))})
    (d / "model.safetensors").rename(d / "a.safetensors")
    write_checkpoint(d, {"w": ("BF16", (2,))})
    return "'w' is stored in both"


def _no_weights(d: Path):
    (d / "config.json").write_text(CONFIG)
    return "no *.safetensors"


@pytest.mark.parametrize("make", [
    _truncated_header, _bad_json, _unknown_dtype, _wrong_nbytes, _offsets_past_the_end,
    _overlapping_offsets, _repeated_tensor_name, _index_names_missing_tensor,
    _shard_holds_unindexed_tensor, _tensor_in_two_files, _no_weights,
], ids=lambda make: make.__name__.strip("_"))
def test_malformed_local_checkpoint_is_one_line_naming_the_file(tmp_path, make):
    expected = make(tmp_path)
    with pytest.raises(HeaderError) as caught:
        read_local(tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert expected in message
    assert message.startswith(str(tmp_path))


# --- no network ------------------------------------------------------------------------------

def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, read, closed)."""
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("call", [
    lambda endpoint: read_hub("org/single", endpoint=endpoint),
    lambda endpoint: hub_file_text("org/single", "config.json", endpoint=endpoint),
    lambda endpoint: hub_file_names("org/single", endpoint=endpoint),
])
def test_an_unreachable_hub_says_so_not_file_not_found(tmp_path, monkeypatch, capfd, call):
    """With no Hub to connect to (a closed port on 127.0.0.1), every Hub read says the Hub cannot
    be reached, in one line, and not that a file is missing from the repo; huggingface_hub's retry
    warnings are not printed (its back-off sleeps are skipped here: they take about 23 s)."""
    import huggingface_hub.utils._http as hub_http
    confine_huggingface_hub(tmp_path, monkeypatch)
    monkeypatch.setattr(hub_http.time, "sleep", lambda seconds: None)
    with pytest.raises(HeaderError) as caught:
        call(f"http://127.0.0.1:{_closed_port()}")
    message = str(caught.value)
    assert "cannot reach the Hub (no network?)" in message and "not found" not in message
    assert message.startswith("hub:org/single@main") and "\n" not in message
    assert "--checkpoint DIR" in message                      # what to do offline
    captured = capfd.readouterr()
    assert "Retrying" not in captured.err and "thrown while requesting" not in captured.err


@pytest.mark.parametrize("call", [
    lambda: read_hub("org/single"),
    lambda: hub_file_text("org/single", "config.json"),
    lambda: hub_file_names("org/single"),
])
def test_offline_mode_says_so_not_file_not_found(tmp_path, monkeypatch, call):
    """With HF_HUB_OFFLINE set and nothing cached, every Hub read names the setting (a file missing
    from the cache is not a file missing from the repo)."""
    from huggingface_hub import constants
    confine_huggingface_hub(tmp_path, monkeypatch)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HeaderError) as caught:
        call()
    assert "HF_HUB_OFFLINE is set" in str(caught.value) and "not found" not in str(caught.value)
