"""The build's fronts and sizing tables (engine/serving/fronts.py) against ``archledger plan``: the front
is non-dominated over every point plan's search evaluated and is plan's ``--json`` front row for row;
the thinned sizing rows give plan's cheapest point for any TTFT/TPOT bound; the grid's ``sizing:``
block is checked like the rest of the grid; a build writes, records and carries the two partitions."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from engine.serving.fronts import FRONTS_SCHEMA, SIZING_SCHEMA, evaluate_model, load_sizing, staircase
from engine.cli import main
from engine.deploy import Options
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.serving.sizing import SLA, search
from engine.language.errors import SpecError

from tests.conftest import _evaluation

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its fronts and sizing evaluation twice.
pytestmark = pytest.mark.xdist_group("fronts")

REPO = Path(__file__).resolve().parent.parent
MODEL, MODEL_ID = "Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B"
GPUS, INPUT, OUTPUT, MAX_GPUS = ["H100", "B200"], 2048, 256, 2
SIZING = {"scenarios": [{"input": INPUT, "output": OUTPUT}], "gpus": GPUS, "frameworks": ["vllm"],
          "kv_dtypes": ["bf16"], "max_gpus": MAX_GPUS}


def small_grid(tmp: Path, sizing: dict | None = SIZING) -> Path:
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    if sizing is not None:
        grid["sizing"] = sizing
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """(fronts, sizing) as frames, and the plain search over every point plan evaluates."""
    ev = _evaluation(MODEL_ID)
    fronts, sizing = evaluate_model(ev, small_grid(tmp_path_factory.mktemp("grid")))
    frames = [pl.DataFrame(cols, schema={k: v[0] for k, v in schema.items()})
              for cols, schema in ((fronts, FRONTS_SCHEMA), (sizing, SIZING_SCHEMA))]
    gpus = load_gpus()
    res = search(ev, [gpus[g] for g in GPUS], INPUT, OUTPUT, SLA(1e30, 1e30), max_gpus=MAX_GPUS,
                 options=Options(framework="vllm"), fusion=load_tables()["vllm"])
    return frames[0], frames[1], {r.gpu: r for r in res}


def _plan(capsys, ttft: float, tpot: float) -> dict:
    args = ["plan", MODEL, "--input", str(INPUT), "--output", str(OUTPUT), "--ttft", repr(ttft), "--tpot", repr(tpot),
            "--max-gpus", str(MAX_GPUS), "--framework", "vllm", "--kv-dtype", "bf16", "--top", "1", "--time", "estimate", "--json"]
    for g in GPUS:
        args += ["--gpu", g]
    main(args)
    return json.loads(capsys.readouterr().out)


def test_staircase_by_hand():
    # preference order 0..4; (ttft, tpot): 1 is beaten by 0 (both larger), 3 ties 2 exactly (2 first),
    # 4 is faster to first token than all: kept
    ttft = np.array([1.0, 2.0, 0.5, 0.5, 0.1])
    tpot = np.array([0.01, 0.02, 0.03, 0.03, 0.05])
    assert staircase(np.arange(5), ttft, tpot) == [0, 2, 4]
    # reversed: 2 ties 3 (3 first: dropped); 1 and 0 each have a lower TPOT than every earlier point
    assert staircase(np.array([4, 3, 2, 1, 0]), ttft, tpot) == [4, 3, 1, 0]


def test_front_is_non_dominated_and_made_of_evaluated_points(tables):
    fronts, _, searches = tables
    assert set(fronts["gpu"]) == set(GPUS)
    for gpu, res in searches.items():
        mine = fronts.filter(pl.col("gpu") == gpu).sort("rank")
        p = res.points
        x, y = p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]
        assert mine.height >= 5
        for row in mine.iter_rows(named=True):
            dominated = (x >= row["tokens_per_s_per_user"]) & (y >= row["tokens_per_s_per_gpu"]) & \
                ((x > row["tokens_per_s_per_user"]) | (y > row["tokens_per_s_per_gpu"]))
            assert not dominated.any(), row
            # the very point the search evaluated: same config, batch and numbers
            c = [i for i, cfg in enumerate(res.configs) if cfg.label() == row["config"]]
            assert len(c) == 1
            hit = np.flatnonzero((p["config"] == c[0]) & (p["batch"] == row["batch"]))
            assert hit.size == 1
            for name in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "max_concurrent_requests"):
                assert row[name] == p[name][hit[0]], name
        covered = ((mine["tokens_per_s_per_user"].to_numpy()[:, None] >= x[None, :])
                   & (mine["tokens_per_s_per_gpu"].to_numpy()[:, None] >= y[None, :])).any(axis=0)
        assert covered.all()


def test_fronts_equal_plan_json_front(tables, capsys):
    fronts, _, _ = tables
    out = _plan(capsys, 1000.0, 1000.0)
    assert out["max_gpus"] == MAX_GPUS and out["framework"] == "vllm"
    fields = ["config", "n_gpus", "tp", "ep", "dp_attn", "pp", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu",
              "tokens_per_s_per_user", "max_concurrent_requests"]
    for g in out["gpus"]:
        mine = fronts.filter(pl.col("gpu") == g["gpu"]).sort("rank").select(fields).to_dicts()
        assert mine == [{k: r[k] for k in fields} for r in g["front"]], g["gpu"]


def test_sizing_rows_answer_as_plan_for_any_bounds(tables, capsys):
    """Brute force over every evaluated point (plan's rule: fewest GPUs, then tokens/s/GPU, the
    search's order on ties) at many bounds, and plan --json itself at a few: the first sizing row
    within the bounds is the same point."""
    _, sizing, searches = tables
    rng = np.random.default_rng(1)
    for gpu, res in searches.items():
        p, mine = res.points, sizing.filter(pl.col("gpu") == gpu).sort("rank")
        assert 0 < mine.height < len(p["batch"]) / 4          # thinned
        order = np.lexsort((-p["tokens_per_s_per_gpu"], p["n_gpus"]))
        ttft_q, tpot_q = np.quantile(p["ttft_s"], [0, 1]), np.quantile(p["tpot_s"], [0, 1])
        for a, b in zip(rng.uniform(*ttft_q, 300), rng.uniform(*tpot_q, 300)):
            ok = order[(p["ttft_s"][order] <= a) & (p["tpot_s"][order] <= b)]
            got = mine.filter((pl.col("ttft_s") <= a) & (pl.col("tpot_s") <= b)).head(1)
            assert (got.height == 0) == (ok.size == 0)
            if ok.size:
                want = res.rows([ok[0]])[0]
                assert (got["config"][0], got["batch"][0]) == (want["config"], want["batch"])
    for ttft, tpot in ((0.5, 0.01), (2.0, 0.02), (10.0, 0.1)):
        out = _plan(capsys, ttft, tpot)
        for g in out["gpus"]:
            got = sizing.filter((pl.col("gpu") == g["gpu"]) & (pl.col("ttft_s") <= ttft)
                                & (pl.col("tpot_s") <= tpot)).sort("rank").head(1).to_dicts()
            if not g["cheapest"]:
                assert not got
                continue
            want = g["cheapest"][0]
            assert {k: got[0][k] for k in ("config", "n_gpus", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu")} == \
                {k: want[k] for k in ("config", "n_gpus", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu")}


@pytest.mark.parametrize("sizing, needle", [
    ({**SIZING, "gpu": ["H100"]}, "sizing.gpu: unknown field 'gpu'"),
    ({**SIZING, "scenarios": [{"input": 0, "output": 8}]}, "sizing.scenarios[0].input: 0 is not a positive integer"),
    ({**SIZING, "frameworks": ["vlm"]}, "sizing.frameworks[0]: unknown framework 'vlm'"),
    ({**SIZING, "max_gpus": "eight"}, "sizing.max_gpus: 'eight' is not a positive integer"),
])
def test_bad_sizing_block_is_one_line(tmp_path, sizing, needle):
    with pytest.raises(SpecError) as err:
        load_sizing(small_grid(tmp_path, sizing))
    line = err.value.one_line()
    assert "grid.yaml:" in line and needle in line and "\n" not in line


def test_default_grid_declares_the_issue_question():
    """The default grid's ``sizing:`` block as corpus/grid.yaml writes it (read here with plain YAML:
    ``gpus`` and ``models`` are lists, or ``all`` for every GPU file / corpus model, which the loader
    keeps as None), and it answers the issue's question: DeepSeek-V3 on H200 and B200 at 8192 + 1024
    under plan's defaults (vLLM, BF16 KV, up to 8 GPUs). ``all`` is resolved to the GPU files and the
    corpus's models before asking, so a block that lost its list cannot pass as None."""
    raw = yaml.safe_load((REPO / "corpus" / "grid.yaml").read_text())["sizing"]
    spec = load_sizing(None)
    assert spec.scenarios == tuple((s["input"], s["output"]) for s in raw["scenarios"])
    assert spec.gpus == (None if raw["gpus"] == "all" else tuple(raw["gpus"]))
    assert spec.models == (None if raw.get("models", "all") == "all" else tuple(raw["models"]))
    assert spec.frameworks == tuple(raw["frameworks"]) and spec.kv_dtypes == tuple(raw["kv_dtypes"])
    gpus = set(load_gpus()) if spec.gpus is None else set(spec.gpus)
    models = {p.stem.replace("--", "/", 1) for p in (REPO / "corpus" / "models").glob("*.yaml")} \
        if spec.models is None else set(spec.models)
    assert (8192, 1024) in spec.scenarios and {"H200", "B200"} <= gpus
    assert "vllm" in spec.frameworks and "bf16" in spec.kv_dtypes and spec.max_gpus == raw["max_gpus"] == 8
    assert "deepseek-ai/DeepSeek-V3" in models


def test_results_doc_lists_every_column():
    doc = (REPO / "docs" / "results.md").read_text()
    for schema in (FRONTS_SCHEMA, SIZING_SCHEMA):
        for name, (dtype, text) in schema.items():
            assert f"| `{name}` | {dtype} | {text} |" in doc, name
    # the fronts' section says which time and which capacity they use, in the sentence plan prints
    from engine.serving.steady import FRONT_BASIS
    section = doc[doc.index("### fronts.parquet"):doc.index("### sizing.parquet")]
    assert FRONT_BASIS in section
    assert "schedule estimate" in FRONT_BASIS and "steady state" in FRONT_BASIS and FRONT_BASIS.count(". ") == 0


def test_models_list_limits_the_step_and_names_corpus_models(tmp_path):
    from engine.serving.fronts import check
    grid = small_grid(tmp_path, {**SIZING, "models": ["deepseek-ai/DeepSeek-V3"]})
    fronts, sizing = evaluate_model(_evaluation(MODEL_ID), grid)
    assert fronts["model_id"] == [] and sizing["model_id"] == []
    check(grid, load_gpus(), {"deepseek-ai/DeepSeek-V3", MODEL_ID})
    with pytest.raises(SpecError) as err:
        check(grid, load_gpus(), {MODEL_ID})
    assert "sizing.models: 'deepseek-ai/DeepSeek-V3' is not a model of the corpus" in err.value.one_line()
    with pytest.raises(SpecError) as err:
        check(small_grid(tmp_path, {**SIZING, "gpus": ["H9000"]}), load_gpus())
    assert "grid.yaml:" in err.value.one_line() and "sizing.gpus: unknown GPU 'H9000'" in err.value.one_line()
    with pytest.raises(SpecError) as err:
        load_sizing(small_grid(tmp_path, {**SIZING, "models": ["DeepSeek-V3"]}))
    assert "sizing.models[0]: 'DeepSeek-V3' is not a Hugging Face model id" in err.value.one_line()
