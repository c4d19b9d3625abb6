"""The deploy page's MTP export against ``archledger deploy --mtp K`` for models the browser test does
not build: DeepSeek-V3 (one MTP module, MoE with MLA) and MiMo-V2-Flash (three modules, so K = 2, 3).

The page (static/js/deploy_eval.js) runs, for K drafts, the exported main program at seq = K + 1 plus
K times the exported draft steps (the --mtp 1 structure's, fused alone; engine/batch/deploy_export.py),
with the weights and KV of the exported ``mtp`` block of the config. Here the same rule is applied to
the exported trees (engine.language.formula_tree.evaluate, the reference semantics of static/js/formula.js)
and compared with the programs and memory of :func:`engine.deploy.plan` with ``mtp_tokens = K``: the
plan's program is the main program's steps, then draft steps whose uids are the exported ones and
whose totals are K times theirs, within 1e-9 relative. No browser: the export is what is tested.
"""
from __future__ import annotations

import math

import pytest
import yaml

GRID = {
    "doc": "Tiny grid for tests/test_mtp_export.py.",
    "gpus": ["H200"], "gpu_counts": [8], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": ["tp"], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 1},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [4096], "beyond_max_context": 1, "output_lengths": [256], "batches": [1]},
    "ops": {"kv_dtypes": [], "points": []},
}
# (model, K values, a point: batch, prompt, output)
CASES = [("deepseek-ai/DeepSeek-V3", (1,), (6, 3000, 500)), ("XiaomiMiMo/MiMo-V2-Flash", (1, 2, 3), (9, 3000, 500))]


@pytest.fixture(scope="module")
def grid_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("mtp-export") / "grid.yaml"
    path.write_text(yaml.safe_dump(GRID, sort_keys=False))
    return path


def _close(got, want, what):
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6), (what, got, want)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].split("/")[1])
def test_export_plus_k_drafts_is_archledger_deploy_mtp(grid_path, case):
    from engine.batch.grid_eval import evaluate_model
    from engine.deploy.structure_cache import regime as _regime
    from engine.deploy import Options, Scenario, plan, tokens_per_device
    from engine.deploy.step_totals import step_totals
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.hardware import load_gpus
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.legality import mtp_modules
    from engine.language import symbols
    from engine.language.api import evaluate
    from engine.language.formula_tree import evaluate as tree_value

    model, ks, (batch, prompt, output) = case
    ev = evaluate(model)
    doc: dict = {}
    evaluate_model(ev, grid_path, export=doc)
    assert doc["mtp_modules"] == mtp_modules(ev) == max(ks)       # config.json: 1 (num_nextn_predict_layers), 3
    option = next(o for o in doc["options"] if doc["configs"][o["config"]]["config"] == "tp8-ep8")
    cfg = doc["configs"][option["config"]]
    gpu = load_gpus()["H200"]
    config = ParallelConfig(tp=8, ep=8)
    table = load_tables(ev.corpus.root / "fusion")["vllm"]
    scenario = Scenario(batch, prompt, output)
    length = prompt + output
    point = {"prefill": {"batch": float(batch), "seq": float(prompt), "ctx": float(prompt)},
             "decode": {"batch": float(batch), "ctx": float(length)}}
    for k in ks:
        built = plan(ev, gpu, config, Options(framework="vllm", mtp_tokens=k, mtp_acceptance=0.5), table, scenario)
        s = built.structure
        # memory: the whole MTP stack on the (only) stage, whatever k
        _close(cfg["mtp"]["weight_bytes_per_gpu"], s.weight_bytes_per_gpu, "weights")
        kv_env = {symbols.LENGTH: float(length), "kv_bytes": 2.0}
        _close(tree_value(doc["trees"][cfg["mtp"]["kv_dev"]], kv_env), float(s.kv_device_fn(length, 2.0)), "kv_dev")
        # programs: the regime of each phase at k + 1 decode tokens per request, as the page picks it
        tokens = tokens_per_device(config, scenario, decode_seq=k + 1)
        for phase, times in (("prefill", 1), ("decode", k)):
            regime = _regime(option["limits"], tokens[phase])
            main = doc["programs"][option[phase][regime]]
            drafts = doc["programs"][option["mtp"][phase][regime]]
            steps = s.programs[phase].steps
            assert len(steps) == len(main) + len(drafts), (k, phase)
            assert [doc["strings"][x[11]] for x in main + drafts] == [st.uid for st in steps], (k, phase)
            assert all(st.uid.startswith("mtp/") or "@mtp/" in st.uid for st in steps[len(main):]), (k, phase)
            env = {**point[phase], "seq": point[phase].get("seq", float(k + 1)), "kv_bytes": 2.0}
            for n, (x, st) in enumerate(zip(main + drafts, steps)):
                scale = 1 if n < len(main) else times
                want = [float(e.subs({symbols.dim(name): value for name, value in env.items()}))
                        for e in step_totals(st)]
                for column in range(4):       # flops, bytes, link bytes, weight bytes
                    _close(scale * tree_value(doc["trees"][x[column]], env), want[column], (k, phase, st.uid, column))
