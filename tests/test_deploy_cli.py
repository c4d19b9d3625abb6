"""``archledger deploy`` as a user runs it: text, --formula, --json (Parquet field names), errors."""
from __future__ import annotations

import json

import pytest

from engine.cli import main

ARGS = ["deploy", "Llama-3.1-70B", "--gpu", "H200", "--gpus", "8", "--tp", "8",
        "--input", "4096", "--output", "1024", "--batch", "32"]
FIELDS = ("model_id", "gpu", "n_gpus", "gpus_per_node", "tp", "ep", "dp_attn", "pp", "cp", "framework",
          "weight_format", "kv_dtype", "batch", "input_len", "output_len", "fits", "weight_bytes_per_gpu",
          "kv_bytes_per_request", "kv_budget_bytes_per_gpu", "max_concurrent_requests", "ttft_s", "tpot_s",
          "tokens_per_s_per_gpu", "extrapolated")
OP_FIELDS = ("op_uid", "op_name", "component", "role", "kind", "flops", "bytes", "comm_bytes", "intensity",
             "t_compute_s", "t_memory_s", "t_comm_s", "t_sol_s", "bound", "flops_formula", "bytes_formula")


def test_deploy_text(capsys):
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    for needle in ("on 8 x H200", "memory per GPU: weights", "max concurrent requests", "fits: yes",
                   "TTFT", "TPOT", "tok/s/GPU", "prefill: SOL", "decode: SOL", "all_reduce", "qkv_proj@"):
        assert needle in out, needle


def test_deploy_json_uses_the_parquet_names_and_units(capsys):
    """Field names and units; the KV size is derived by hand (Llama-3.1-70B: 80 layers, 8 KV heads
    of 128, K and V, BF16); the phase totals vs the per-op sums are a consistency check."""
    assert main(ARGS + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    dep = data["deployment"]
    assert set(FIELDS) <= set(dep)
    assert dep["n_gpus"] == 8 and dep["tp"] == 8 and dep["framework"] == "vllm"
    assert dep["kv_bytes_per_request"] == 2 * 80 * 8 * 128 * 2 * (4096 + 1024)     # bytes, whole request
    assert 0 < dep["tpot_s"] < dep["ttft_s"]                                       # seconds
    for phase in ("prefill", "decode"):
        rows = data["ops"][phase]
        assert rows and all(set(OP_FIELDS) <= set(r) for r in rows)
        assert abs(sum(r["t_sol_s"] for r in rows) - data["phases"][phase]["step_time_s"]) < 1e-12
    # chunked prefill: 32 prompts x 4096 tokens = 131,072 tokens in steps of 8192 -> 16 steps
    assert dep["prefill_steps"] == 32 * 4096 // 8192 == 16
    assert dep["ttft_s"] == pytest.approx(16 * data["phases"]["prefill"]["step_time_s"], rel=1e-12)


def test_deploy_formula_shows_formulas_over_dims_and_degrees(capsys):
    assert main(ARGS + ["--formula", "--phase", "decode", "--framework", "none"]) == 0
    out = capsys.readouterr().out
    assert "flops = 2*batch*d_head*hidden*n_heads*n_layers*seq/tp" in out
    assert "comm  = " in out
    assert "formulas bind: " in out and "hidden=8192" in out and "tp=8" in out and "kv_bytes=2" in out


def test_deploy_unfused_prints_both_programs(capsys):
    assert main(ARGS + ["--unfused", "--phase", "decode"]) == 0
    out = capsys.readouterr().out
    assert "decode (unfused): SOL" in out and "decode: SOL" in out


def test_gpus_default_and_replicas(capsys):
    assert main(["deploy", "Llama-3.1-8B", "--gpu", "H100", "--gpus", "4", "--json"]) == 0
    dep = json.loads(capsys.readouterr().out)["deployment"]
    assert dep["n_gpus"] == 4 and dep["dp"] == 4 and dep["tp"] == 1


@pytest.mark.parametrize("extra,needle", [
    (["--gpu", "H1000"], "unknown GPU 'H1000'"),
    (["--tp", "3", "--gpus", "3"], "n_heads = 64 is not divisible by tp = 3"),
    (["--gpus", "12"], "tp x pp x cp = 8 does not divide 12 GPUs"),
    (["--framework", "tensorrt"], "unknown framework 'tensorrt'"),
    (["--kv-dtype", "int3"], "unknown KV dtype 'int3'"),
    (["--weight-format", "int2"], "unknown weight format 'int2'"),
])
def test_bad_input_is_one_line_exit_2(capsys, extra, needle):
    args = list(ARGS)
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and err.startswith("error: ")


def test_context_beyond_max_and_batch_that_does_not_fit(capsys):
    assert main(["deploy", "Llama-3.1-70B", "--gpu", "H100", "--tp", "2", "--input", "200000",
                 "--output", "100", "--batch", "64"]) == 1     # does not fit: exit 1, numbers still printed
    out = capsys.readouterr().out
    assert "EXTRAPOLATED" in out and "fits: NO — batch 64 exceeds the capacity of" in out and "short by" in out


def test_weights_that_cannot_fit_say_so_and_exit_1(capsys):
    """Llama-3.1-405B in BF16 on one H100: 405.85 G parameters x 2 B = 811.7 GB of weights (Meta's
    model card: 405B parameters, BF16) against 0.9 x 80 GB (the datasheet's 80 GB; 81,559 MiB =
    85.5 GB reported, x 0.9 = 77.0 GB usable). The weights alone exceed the GPU: the line says
    that, in one unit (GB), and the command exits 1 as plan does when nothing fits."""
    import re
    assert main(["deploy", "Llama-3.1-405B", "--gpu", "H100"]) == 1
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.strip().startswith("fits:"))
    m = re.search(r"the weights alone \((\d+) GB per GPU\) exceed the usable ([0-9.]+) GB", line)
    assert m, line
    assert 800 <= int(m.group(1)) <= 820 and 76 <= float(m.group(2)) <= 78, line
    assert "iB" not in out
    # the JSON says the same: exit 1 and fits false
    assert main(["deploy", "Llama-3.1-405B", "--gpu", "H100", "--json"]) == 1
    import json
    assert json.loads(capsys.readouterr().out)["deployment"]["fits"] is False
