"""``archledger deploy`` on a built checkout answers from the build's formula document (issue 42).

* Consistency (the gate of the fast path, engine/cli/deploy_fast.py): ``deploy --json`` from the
  document and from compiling the spec print the same text, every float to the bit, for a dense
  model, an MLA MoE under expert parallelism and DP-attention, and a hybrid Mamba MoE, at batches
  and prompts of several fusion regimes (the expected times from measured kernels included).
* Fallback: a stale build (an edited spec: the corpus is not the one the build read), an option
  outside the document (another prefill budget, KV dtype, HBM share, a config or GPU the grid did
  not run, MTP) and a document whose trees are not in evaluation order all compile instead.
* What the fast path skips: no spec is walked, no structure built, no expression compiled (in
  process, the walk and the planner refused); a cold process takes it and never imports sympy
  (the modules it runs make their symbols, printers and compile helpers on first use).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

MODELS = {"meta-llama--Meta-Llama-3.1-70B.yaml", "deepseek-ai--DeepSeek-V3.yaml",
          "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.yaml"}
#: the cells the commands below ask (H100 and H200, 2 and 8 GPUs; both frameworks); BF16 KV only
GRID = {"doc": "tests/test_deploy_stored.py", "gpus": ["H100", "H200"], "gpu_counts": [2, 8], "beyond_fit": 1,
        "parallel": {"max_pp": 1, "cp": [1], "ep": [1, "tp"], "dp_attn": [1, "tp"], "tp_in_domain": True,
                     "pp_after_tp": 8},
        "frameworks": ["vllm", "sglang"], "kv_dtypes": ["bf16"],
        "scenarios": {"input_lengths": [4096], "beyond_max_context": 1, "output_lengths": [1024], "batches": [1]},
        "ops": {"kv_dtypes": [], "points": []}}

ASKED = [
    ["Llama-3.1-70B", "--gpu", "H100", "--tp", "8"],
    ["Llama-3.1-70B", "--gpu", "H100", "--tp", "8", "--batch", "64", "--input", "16384", "--output", "512"],
    ["Llama-3.1-70B", "--gpu", "H200", "--tp", "8", "--framework", "sglang", "--batch", "300"],
    ["DeepSeek-V3", "--gpu", "H200", "--tp", "8", "--dp-attn", "8", "--ep", "8"],
    ["DeepSeek-V3", "--gpu", "H200", "--tp", "8", "--dp-attn", "8", "--ep", "8", "--batch", "256", "--input", "2000"],
    ["Nemotron-3-Nano-30B-A3B-BF16", "--gpu", "H100", "--tp", "2"],
    ["Nemotron-3-Nano-30B-A3B-BF16", "--gpu", "H100", "--tp", "2", "--batch", "40", "--input", "100000"],
]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A corpus copy holding MODELS only, built over :data:`GRID` without the site."""
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    root = tmp_path_factory.mktemp("stored-deploy")
    shutil.copytree(REPO / "corpus", root / "corpus")
    for spec in (root / "corpus" / "models").glob("*.yaml"):
        if spec.name not in MODELS:
            spec.unlink()
    for variant in (root / "corpus" / "variants").glob("*.yaml"):
        variant.unlink()
    (root / "grid.yaml").write_text(yaml.safe_dump(GRID, sort_keys=False))
    build(load_corpus(root / "corpus"), root / "out", grid_path=root / "grid.yaml", jobs=1)
    return root


def _args(root, argv: list[str]) -> argparse.Namespace:
    """``deploy ARGV``'s arguments as the command line gives them (``--corpus``, ``--out`` made absolute)."""
    from engine.cli import parser
    from engine.project import locate
    args = parser().parse_args(["--corpus", str(root / "corpus"), "--out", str(root / "out"), "deploy", *argv,
                                "--json"])
    project = locate(args.corpus, args.out)     # as engine.cli.dispatch
    args.project, args.corpus, args.out, args.gpus_root = project, str(project.corpus), str(project.out), project.gpus
    return args


@pytest.mark.parametrize("argv", ASKED, ids=[" ".join(a) for a in ASKED])
def test_consistency_stored_and_compiled_deploy_json(checkout, argv):
    from engine.cli.deploy import deployment_from_args, json_text
    from engine.cli.deploy_fast import stored_deployment
    args = _args(checkout, argv)
    stored = stored_deployment(args)
    assert stored is not None                    # the build answers this one
    compiled = deployment_from_args(args)
    phases = ("prefill", "decode")
    assert json_text(stored, phases) == json_text(compiled, phases)
    assert "ttft_expected_s" in stored.summary and any(r["measured"] for r in stored.ops["decode"])


@pytest.mark.parametrize("extra", [["--prefill-tokens", "4096"], ["--kv-dtype", "fp8"], ["--hbm-fraction", "0.8"],
                                   ["--gpu", "B200"], ["--tp", "4"], ["--gpus-per-node", "4"], ["--gpus", "16"],
                                   ["--mtp", "1", "--acceptance", "0.8"], ["--framework", "trtllm"],
                                   ["--weight-format", "fp8"], ["--overlap", "two_batch"]])
def test_an_option_outside_the_document_compiles(checkout, extra):
    from engine.cli.deploy_fast import stored_deployment
    argv = ["DeepSeek-V3", "--gpu", "H200", "--tp", "8", "--dp-attn", "8", "--ep", "8"]
    assert stored_deployment(_args(checkout, argv + extra)) is None


def test_a_stale_build_compiles(checkout, tmp_path):
    """An edited spec (a comment: the numbers do not change) is not the input the build read."""
    from engine.cli.deploy_fast import stored_deployment
    root = tmp_path / "copy"
    shutil.copytree(checkout, root)
    argv = ["Llama-3.1-70B", "--gpu", "H100", "--tp", "8"]
    assert stored_deployment(_args(root, argv)) is not None
    spec = root / "corpus" / "models" / "meta-llama--Meta-Llama-3.1-70B.yaml"
    spec.write_text(spec.read_text() + "\n# edited\n")
    assert stored_deployment(_args(root, argv)) is None


def test_a_document_without_evaluation_order_or_not_its_record_compiles(checkout, tmp_path):
    from engine.cli.deploy_fast import stored_deployment
    root = tmp_path / "copy"
    shutil.copytree(checkout, root)
    argv = ["Llama-3.1-70B", "--gpu", "H100", "--tp", "8"]
    path = root / "out" / "results" / "formulas" / "meta-llama--Meta-Llama-3.1-70B.json"
    doc = json.loads(path.read_text())
    doc["evaluation_order"] = False
    path.write_text(json.dumps(doc, separators=(",", ":")))      # no longer the manifest's record either
    assert stored_deployment(_args(root, argv)) is None


def test_the_fast_path_walks_places_and_compiles_nothing(checkout, monkeypatch):
    """From the document: no spec is walked, no structure built, no expression compiled (the step
    functions, the KV terms and the measured tables' rooflines all come from stored trees)."""
    from engine.cli.deploy_fast import stored_deployment
    from engine.deploy import interpolation, planner
    from engine.deploy import step_functions as cost
    from engine.language import api, kv

    def refused(*args, **kwargs):
        raise AssertionError("the fast path compiled from the spec")
    for module, name in ((api, "evaluate_one"), (api, "evaluate_spec"), (planner, "build_structure"),
                         (planner, "plan")):
        monkeypatch.setattr(module, name, refused)
    compiled = (len(cost._FUNCTIONS), len(interpolation._ROOFS), len(kv._COMPILED))
    argv = ["Nemotron-3-Nano-30B-A3B-BF16", "--gpu", "H100", "--tp", "2", "--batch", "40", "--input", "100000"]
    d = stored_deployment(_args(checkout, argv))
    assert d is not None and any(", extrapolated" in r["expected_src"] for r in d.ops["prefill"] + d.ops["decode"])
    assert (len(cost._FUNCTIONS), len(interpolation._ROOFS), len(kv._COMPILED)) == compiled


def test_a_cold_deploy_on_the_build_takes_the_fast_path(checkout):
    """In a fresh process (``python -X importtime``: the modules it imported) the command read the
    document, never walked a spec (the walk pulls in sympy.tensor.tensor, docs/scaling.md) and never
    imported sympy at all (nor the spec walk, the compile path or the corpus loader): the modules the
    stored path runs make their sympy objects on first use (docs/scaling.md, issue 42)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "site_builder.cli", "--corpus",
                           str(checkout / "corpus"), "--out", str(checkout / "out"), "deploy", "Llama-3.1-70B",
                           "--gpu", "H100", "--tp", "8", "--json"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    names = {m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|(.+)$", done.stderr, re.M)}
    assert json.loads(done.stdout)["deployment"]["model_id"] == "meta-llama/Meta-Llama-3.1-70B"
    assert "engine.deploy.stored" in names and "sympy.tensor.tensor" not in names
    assert "sympy" not in names and "mpmath" not in names
    assert not names & {"engine.language.evaluate", "engine.language.expr", "engine.language.corpus",
                        "engine.deploy.planner", "engine.deploy.step_functions"}
