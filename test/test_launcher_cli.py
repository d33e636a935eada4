"""``python -m torch_npu._inductor.patchset launcher``: plan, C++, dry run, samples table."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from torch_npu._inductor.patchset import cli


def run_cli(*argv, capsys):
    code = cli.main(["launcher", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_text(capsys):
    code, out, err = run_cli("--metadata", '{"name": "k mix", "workspace_size": 64, "lock_num": 3, "lock_init_val": 5}',
                             "--grid", "4,2,1", capsys=capsys)
    assert code == 0, err
    assert "workspace of 64 bytes per block" in out and "3 int64 lock slots, each = 5" in out
    assert "lock bytes        24" in out and "workspace bytes   512" in out


def test_emit_cpp_and_simulate_json(capsys):
    meta = {"name": "triton_x mix", "mix_mode": "mix", "sync_block_lock_layout": (1 << 32) | 1,
            "auto_tile_and_bind_subblock": True, "workspace_size": 32, "lock_init_val": -1}
    code, out, err = run_cli("--metadata", json.dumps(meta), "--grid", "6,1,1", "--signature", "*fp16,*fp32,i32",
                             "--vector-cores", "4", "--emit-cpp", "--simulate", "--json", capsys=capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True and len(data["launches"]) == 2
    assert data["plan"]["participant_factor"] == 2 and data["plan"]["block_num"] == 4
    assert "acquire_launch_resources(" in data["cpp"]
    for launch in data["launches"]:
        assert set(launch) >= {"workspace_bytes", "lock_bytes", "regions_overlap", "lock_values_at_start",
                               "allocator_calls", "sync_copies", "host_blocking_calls", "ok"}
        assert launch["lock_values_at_start"] == [-1, 0, 8]  # ordered = -1; unordered: P = 4 x 2, zeros
        assert launch["lock_bytes"] == 64 + (1 + 2 * 8) * 64 and launch["workspace_bytes"] == 32 * 6
        assert launch["allocator_calls"] == 1 and launch["sync_copies"] == 0 and not launch["regions_overlap"]


def test_metadata_from_file(tmp_path, capsys):
    f = tmp_path / "meta.json"
    f.write_text('{"name": "k", "lock_num": 4294967296}')
    code, out, _ = run_cli("--metadata", f"@{f}", "--json", capsys=capsys)
    assert code == 0
    plan = json.loads(out)["plan"]
    assert plan["lock_layout"] == "packed" and plan["unordered_locks"] == 1 and plan["lock_bytes"] == 3 * 64


@pytest.mark.parametrize(
    "meta,words",
    [
        ('{"name": "k", "workspace_size": -1}', "workspace_size=-1 is negative"),
        ('{"name": "k", "lock_num": true}', "lock_num=True is a bool"),
        ('{"name": "k", "lock_num": 9223372036854775808}', "overflows int64"),
        ("{not json", "bad metadata"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_metadata_exits_2_with_error_on_stderr(meta, words, capsys):
    code, out, err = run_cli("--metadata", meta, capsys=capsys)
    assert code == 2 and out == ""
    assert words in err


def test_bad_grid_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["launcher", "--metadata", "{}", "--grid", "0,1,1"])
    assert info.value.code == 2


def test_samples_table_through_python_m():
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "launcher", "--samples"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for key in ("none", "workspace", "locks", "both", "packed-mix", "lock-num-2pow32", "simt-only", "ffts"):
        assert f"\n{key} " in out
    assert "all ok: True" in out
    assert "not as a 34359738368-byte request" in out


def test_samples_json(capsys):
    code = cli.main(["launcher", "--samples", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ok"]
    both = next(r for r in data["samples"] if r["sample"] == "both")
    assert both["plan"]["lock_bytes"] == 32 and both["plan"]["workspace_bytes"] == 1024 * 24
    assert all(launch["ok"] for launch in both["launches"])
