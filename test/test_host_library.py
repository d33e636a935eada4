"""The host ACL library's pure parts (``tooling/sim/host_library.py``, ``tooling/releases/elf.py``) and the
command line's bad input: no wheel needed. The library itself, built for each release and loaded by
torch_npu, is test_host_acl.py's."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from torch_npu._inductor.patchset.tooling.releases import elf
from torch_npu._inductor.patchset.tooling.sim import build as sim_build
from torch_npu._inductor.patchset.tooling.sim import host_library as hl

HEADER = '''
typedef int aclError;
typedef void *aclrtStream;
extern "C" {
__attribute__((visibility("default"))) aclError aclrtMalloc(void **devPtr, unsigned long size, int policy);
__attribute__((deprecated("use aclFooV2 (see its header); x")))
__attribute__((visibility("default"))) const char *aclGetRecentErrMsg();
void aclAppLog(int level, const char *fmt, ...);
typedef aclError (*aclrtCallback)(void *userData);
struct aclInner { int (*fn)(int); int member(int); };
static inline int aclHelper(int x) { return x + 1; }
aclError aclSetShape(int dims[][2], unsigned long n);
}
namespace ge { int NotC(int); }
int CxxFunction(int);
'''


def test_declarations_read_c_functions_at_global_scope_only():
    d = hl.declarations(HEADER)
    assert d["aclrtMalloc"] == hl.Decl("aclrtMalloc", "aclError", "void **devPtr, unsigned long size, int policy", True)
    assert d["aclGetRecentErrMsg"].ret == "const char *" and d["aclGetRecentErrMsg"].params == ""
    assert d["aclAppLog"].param_names() is None  # variadic: never forwarded
    assert d["aclSetShape"].param_names() is None  # array parameter
    assert d["aclrtMalloc"].param_names() == ["devPtr", "size", "policy"]
    assert not d["CxxFunction"].c_linkage
    for absent in ("aclrtCallback", "fn", "member", "aclHelper", "NotC"):
        assert absent not in d, absent


def test_out_values_are_pointers_to_non_const():
    d = hl.declarations(HEADER)
    assert d["aclrtMalloc"].out_params() == ["void **devPtr"]
    assert hl.Decl("f", "aclError", "const char *name, int n", True).out_params() == []


@pytest.mark.parametrize("ret, value, can_fail", [
    ("aclError", "ACL_ERROR_RT_FEATURE_NOT_SUPPORT", True),
    ("rtError_t", "static_cast<rtError_t>(ACL_ERROR_RT_FEATURE_NOT_SUPPORT)", True),
    ("HcclResult", "HCCL_E_NOT_SUPPORT", True),
    ("int32_t", "-1", True),
    ("const char *", "nullptr", True),
    ("aclTensorDesc *", "nullptr", True),
    ("aclDataType", "ACL_DT_UNDEFINED", True),
    ("aclnnStatus", "561000", True),  # ACLNN_ERR_INNER
    ("void", None, False),
    ("size_t", "size_t{}", False),
])
def test_a_failing_stub_returns_its_types_failure_value(ret, value, can_fail):
    assert hl.failure_value(ret) == (value, can_fail)


OP_API_COMMON_BASE = """
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef aclTensor *(*_aclCreateTensor)(const int64_t *view_dims, uint64_t view_dims_num, aclDataType data_type,
    const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storage_dims, uint64_t storage_dims_num,
    void *tensor_data);
typedef int (*_aclDestroyTensor)(const aclTensor *tensor);  // a comment (with parentheses)
using OpApiFunc = int (*)(void *, uint64_t, aclOpExecutor *, const aclrtStream);
template <typename Tuple> auto ConvertToOpApiFunc(const Tuple &params, void *opApiAddr)
{
    typedef int (*OpApiFunc)(typename std::decay<decltype(std::get<I>(params))>::type...);
}
"""


def test_op_plugins_function_pointer_types_become_declarations():
    text = hl.opapi_prototypes(OP_API_COMMON_BASE)
    d = hl.declarations("\n".join(x for x in text.splitlines() if not x.startswith("#")))  # as preprocessed
    assert set(d) == {"aclCreateTensor", "aclDestroyTensor"}
    assert d["aclCreateTensor"].ret == "aclTensor *" and d["aclCreateTensor"].c_linkage
    assert d["aclCreateTensor"].param_names()[-1] == "tensor_data"
    assert d["aclDestroyTensor"] == hl.Decl("aclDestroyTensor", "int", "const aclTensor *tensor", True)
    assert "typedef struct aclTensor aclTensor;" in text
    assert "using acl_host_wheel_OpApiFunc = int (*)(void *, uint64_t, aclOpExecutor *, const aclrtStream);" in text
    assert hl.opapi_prototypes("typedef struct aclTensor aclTensor;") is None


def test_no_stated_noop_says_nothing():
    for name, why in hl.STATED_NOOPS.items():
        assert len(why) > 20, name


def test_elf_reads_this_interpreter():
    defined, undefined = elf.dynamic_symbols(sys.executable)
    assert elf.needed(sys.executable) is not None
    assert defined or undefined


@pytest.mark.parametrize("args", [("inventory", "not-a-release"), ("import-check", "2.7"), ("nope",), ()])
def test_cli_bad_input_is_one_line_and_exit_2(args):
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset.tooling.releases.host_runtime", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_the_host_library_compiles_the_acl_core_and_the_simulation_adds_the_stand_ins():
    """acl_sim/src holds the ACL core and torch_npu's stand-ins in files of their own; the host ACL library
    compiles only the core (torch_npu's own code takes the stand-ins' place there), the simulation both, and
    CMakeLists.txt lists the same two sets."""
    core, standins = set(sim_build.CORE_SOURCES), set(sim_build.STANDIN_SOURCES)
    assert not core & standins and core | standins == set(sim_build.SIM_SOURCES.glob("*.cpp"))
    host_sources = set(hl._sources())
    assert core <= host_sources and not standins & host_sources
    cmake = (Path(__file__).resolve().parents[1] / "CMakeLists.txt").read_text()
    for var, files in (("SIM_CORE_SOURCES", core), ("SIM_STANDIN_SOURCES", standins)):
        m = re.search(rf"set\({var}\s+([^)]*)\)", cmake)
        assert m, var
        assert {p.rsplit("/", 1)[-1] for p in m.group(1).split()} == {f.name for f in files}, var
    # the core defines no torch_npu symbol: the stand-ins' file does
    for f in core:
        assert "at_npu" not in f.read_text() and "OpCommand" not in f.read_text(), f.name
