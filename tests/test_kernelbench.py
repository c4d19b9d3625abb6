"""``archledger kernelbench`` (engine.deploy.kernelbench, engine.deploy.kernel_shapes): the GEMM
shapes a model's dims give, written out by hand; the schema round trip on CPU with tiny shapes
(bench -> files -> engine.deploy.measured's loader -> a lookup returns the file's number on the
grid and the hand-computed log-space mean between two points); refusing to overwrite, and a
second version of a table; torch missing. No timing is asserted anywhere: only where each
measured number lands.

The tests that run torch skip without it, as the other oracle tests do (the README's test command
installs the ``oracle`` extra, so CI runs them)."""
from __future__ import annotations

import builtins
import datetime
import math
import shutil

import pytest
import yaml

from engine.cli import main
from engine.deploy.kernel_shapes import corpus_dims, gemm_axes, model_gemms, spread
from engine.deploy.measured import gemm_roof, interpolate, load_measured

from tests.conftest import REPO

_WHY = "torch is not installed: pip install -e '.[oracle]'"
#: Two tiny (n, k) pairs and two token counts: a 2 x 2 x 2 GEMM grid, milliseconds on a CPU.
TINY = ["--device", "cpu", "--quick", "--gpu-name", "H100", "--framework", "vllm", "--gemm-shapes", "64x32,128x64",
        "--tokens", "1,4"]
ROOF = gemm_roof(1e15, 3e12, 2.0)       # the lookup's clip outside the range; these points lie inside


# -- shapes from a model's dims ---------------------------------------------------------------------

#: Llama-3.1-8B's config (its model card / config.json): hidden 4096, intermediate 14336, 32 query
#: heads of 128, 8 KV heads, vocab 128256.
LLAMA_8B = {"hidden": 4096, "d_ff": 14336, "n_heads": 32, "n_kv_heads": 8, "d_head": 128, "vocab": 128256}


def test_llama_8b_gemm_shapes_by_hand(corpus):
    # the corpus binds the published dims
    dims = corpus_dims(corpus, ["meta-llama/Meta-Llama-3.1-8B"])["meta-llama/Meta-Llama-3.1-8B"]
    assert {k: dims[k] for k in LLAMA_8B} == LLAMA_8B
    # (n, k) on one GPU: q 32 x 128 = 4096 out of 4096; k, v 8 x 128 = 1024; fused QKV 4096 + 2 x 1024
    # = 6144; o back to 4096 from 4096; gate, up 14336 from 4096, fused 2 x 14336 = 28672; down
    # 4096 from 14336; the LM head 128256 from 4096
    assert model_gemms(dims) == [
        ("q", 4096, 4096), ("k", 1024, 4096), ("v", 1024, 4096), ("qkv", 6144, 4096), ("o", 4096, 4096),
        ("gate", 14336, 4096), ("up", 14336, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336),
        ("lm_head", 128256, 4096)]
    # one GPU of TP 8: q 4096 / 8 = 512; 8 KV heads over 8 GPUs, one each: 128; QKV 512 + 256 = 768;
    # o (row-parallel) 4096 from 512; gate, up 14336 / 8 = 1792, fused 3584; down 4096 from 1792;
    # the LM head 128256 / 8 = 16032
    assert model_gemms(dims, tp=8) == [
        ("q", 512, 4096), ("k", 128, 4096), ("v", 128, 4096), ("qkv", 768, 4096), ("o", 4096, 512),
        ("gate", 1792, 4096), ("up", 1792, 4096), ("gate_up", 3584, 4096), ("down", 4096, 1792),
        ("lm_head", 16032, 4096)]


def test_tp_wider_than_the_kv_heads_keeps_one_per_gpu():
    # 8 KV heads over TP 16: each GPU keeps one (128 features), not half of one
    assert ("k", 128, 4096) in model_gemms(LLAMA_8B, tp=16)


def test_the_grid_spreads_the_corpus_values_in_log_space():
    # nine powers of two 128 .. 32768 thinned to three: the log-even targets are 128, 2048, 32768
    assert spread([1 << i for i in range(7, 16)], 3) == [128, 2048, 32768]
    # nearest in log, not in value: to the middle target 2048, 3500 is 1.71x away and 1024 2x
    # (though 1024 is nearer in value)
    assert spread([128, 1024, 3500, 32768], 3) == [128, 3500, 32768]
    # few enough: kept as they are, sorted, distinct
    assert spread([4096, 1024, 4096], 24) == [1024, 4096]
    # one value: the loader interpolates between two, so v gains 2v
    assert spread([4096], 24) == [4096, 8192]
    assert gemm_axes({(1024, 4096), (4096, 14336)}, 24) == ([1024, 4096], [4096, 14336])


# -- the round trip on CPU --------------------------------------------------------------------------

def _bench(tmp_path, *extra):
    out = tmp_path / "gpus" / "measured"
    return out, main(["kernelbench", *TINY, "--out", str(out), "--classes", "gemm,attention", *extra])


def test_round_trip_through_the_loader(tmp_path):
    torch = pytest.importorskip("torch", reason=_WHY)
    out, code = _bench(tmp_path)
    assert code == 0
    folder = out / "h100" / ("vllm-torch" + str(torch.__version__).split("+")[0])
    assert sorted(p.name for p in folder.iterdir()) == [
        "decode_attention-bf16_d128.yaml", "gemm-bf16.yaml", "prefill_attention-bf16_d128.yaml"]
    # the file, read as plain YAML (not through the code under test)
    data = yaml.safe_load((folder / "gemm-bf16.yaml").read_text())
    assert [a["values"] for a in data["axes"]] == [[1, 4], [64, 128], [32, 64]]
    rows = data["latency_us"]                       # row = (m index) x 2 + (n index), column = k index
    assert len(rows) == 4 and all(len(r) == 2 and all(x > 0 for x in r) for r in rows)
    src = data["source"]
    assert src["tool"] == "archledger kernelbench" and src["version"] == str(torch.__version__)
    assert src["device"].startswith("cpu") and "--gemm-shapes 64x32,128x64" in src["command"]
    assert abs(datetime.datetime.fromisoformat(src["date"].replace("Z", "+00:00"))
               - datetime.datetime.now(datetime.timezone.utc)) < datetime.timedelta(hours=1)

    # deploy's own call (this GPU, this framework) finds it as it finds an imported table
    table = load_measured(out, gpu="H100", framework="vllm")[("H100", "vllm", "gemm", "bf16")]
    us = lambda m, n, k: interpolate(table, (m, n, k), ROOF)[0] * 1e6     # noqa: E731
    # on the grid: the number written in the file at that point
    for i, m in enumerate([1, 4]):
        for j, n in enumerate([64, 128]):
            for c, k in enumerate([32, 64]):
                assert us(m, n, k) == pytest.approx(rows[2 * i + j][c])
    # k = sqrt(32 x 64), halfway in log between the two: the geometric mean of its neighbours
    a, b = rows[2 * 1 + 0]                          # m = 4, n = 64, k = 32 and 64
    assert us(4, 64, math.sqrt(32 * 64)) == pytest.approx(math.sqrt(a * b))
    assert min(a, b) <= us(4, 64, 40) <= max(a, b)

    # attention: the decode table's axes are the lookup's, in its order
    decode = load_measured(out, gpu="H100", framework="vllm")[("H100", "vllm", "decode_attention", "bf16_d128")]
    assert decode.axes == ("batch", "kv_heads", "q_per_kv", "ctx")


def test_default_destination_is_the_checkouts_measured_tables(tmp_path, monkeypatch):
    """Without --out the tables go where deploy and plan read them, the checkout's gpus/measured/
    (not the build's output folder, which the command line's other --out names)."""
    pytest.importorskip("torch", reason=_WHY)
    shutil.copytree(REPO / "gpus", tmp_path / "gpus", ignore=shutil.ignore_patterns("measured"))
    shutil.copytree(REPO / "corpus" / "fusion", tmp_path / "corpus" / "fusion")
    (tmp_path / "corpus" / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["kernelbench", *TINY, "--classes", "gemm"]) == 0
    (path,) = tmp_path.rglob("gemm-bf16.yaml")
    assert path.relative_to(tmp_path).parts[:3] == ("gpus", "measured", "h100")


def test_refuses_to_overwrite_without_force(tmp_path, capsys):
    pytest.importorskip("torch", reason=_WHY)
    out, code = _bench(tmp_path, "--classes", "gemm")
    assert code == 0
    (path,) = out.rglob("gemm-bf16.yaml")
    before = path.read_bytes()
    capsys.readouterr()
    _, code = _bench(tmp_path, "--classes", "gemm")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--force" in err and "gemm-bf16.yaml" in err
    assert path.read_bytes() == before
    # nothing left beside it: the staging folder is gone
    assert [p.name for p in (tmp_path / "gpus").iterdir()] == ["measured"]
    _, code = _bench(tmp_path, "--classes", "gemm", "--force")
    assert code == 0 and yaml.safe_load(path.read_text())["source"]["command"].endswith("--force")


def test_refuses_a_second_version_of_a_table(tmp_path, capsys):
    """An imported H100 vLLM bf16 GEMM table already under the output: deploy reads one version per
    framework, so a second is refused before anything is written."""
    pytest.importorskip("torch", reason=_WHY)
    out = tmp_path / "gpus" / "measured"
    imported = next((REPO / "gpus" / "measured" / "h100").glob("vllm-*/gemm-bf16.yaml"))
    (out / "h100" / imported.parent.name).mkdir(parents=True)
    shutil.copy(imported, out / "h100" / imported.parent.name / imported.name)
    _, code = _bench(tmp_path, "--classes", "gemm")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and f"{imported.parent.name}/gemm-bf16.yaml" in err and "another version" in err
    assert sorted(p.parent.name for p in out.rglob("*.yaml")) == [imported.parent.name]


def test_missing_torch_is_one_line(tmp_path, monkeypatch, capsys):
    real = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    out, code = _bench(tmp_path)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == "error: torch is not installed — kernelbench measures with it: pip install -e '.[oracle]'"
    assert not out.exists()


# -- the writer: each number lands where the loader reads it; a bad table is never moved in ------

def _bench_of(torch):
    from engine.deploy.kernelbench import Bench
    return Bench(torch, "cpu", "H100", "vllm", "test", "archledger kernelbench (test)")


def test_each_point_lands_where_the_loader_reads_it(tmp_path):
    """Eight points with eight different times (µs = 100 m + 10 n/64 + k/32 by construction): the
    lookup at each returns its own time, so no axis is swapped or transposed in the rows."""
    torch = pytest.importorskip("torch", reason=_WHY)
    from engine.deploy.kernelbench import table, write_tables
    from engine.deploy.hardware import load_gpus
    axes = [("m", [1, 2]), ("n", [64, 128]), ("k", [32, 64])]
    points = {(m, n, k): (100 * m + 10 * n / 64 + k / 32) * 1e-6 for m in (1, 2) for n in (64, 128) for k in (32, 64)}
    out = tmp_path / "gpus" / "measured"
    write_tables([table(_bench_of(torch), "gemm", "bf16", "vllm", "test", "hand-made points", axes, points)],
                 out, load_gpus(REPO / "gpus"))
    t = load_measured(out)[("H100", "vllm", "gemm", "bf16")]
    for (m, n, k), seconds in points.items():
        assert interpolate(t, (m, n, k), ROOF)[0] == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["zero", "gpu"])
def test_a_table_the_loader_refuses_is_never_written(tmp_path, bad):
    """A zero time (a timer that read nothing) or a GPU no gpus/*.yaml names: refused by the
    project's loader in the staging folder, one line naming the field; nothing under the output."""
    torch = pytest.importorskip("torch", reason=_WHY)
    from engine.deploy.kernelbench import table, write_tables
    from engine.deploy.hardware import load_gpus
    from engine.language.errors import SpecError
    bench = _bench_of(torch)
    points = {(m, n, k): 1e-5 for m in (1, 2) for n in (64, 128) for k in (32, 64)}
    if bad == "zero":
        points[(2, 128, 64)] = 0.0
    else:
        bench.gpu = "H100-lookalike"
    out = tmp_path / "gpus" / "measured"
    with pytest.raises(SpecError) as e:
        write_tables([table(bench, "gemm", "bf16", "vllm", "test", "hand-made points",
                            [("m", [1, 2]), ("n", [64, 128]), ("k", [32, 64])], points)], out, load_gpus(REPO / "gpus"))
    assert ("latency_us" if bad == "zero" else "unknown GPU") in e.value.one_line()
    assert list(tmp_path.iterdir()) == []          # no output, no staging folder left
