// HOST ACL LIBRARY (a test double of CANN; see README.md): declarations a wheel's own headers may
// lack, for the functions the double defines or stubs. Each block is compiled only when the wheel's
// headers do not declare that name (tooling/sim/host_library.py defines ACL_HOST_HAS_<name> for
// every function and type the wheel's headers declare), so a wheel's own prototype always wins.
//
// Source of each prototype: the CANN headers shipped in torch_npu 2.7.1.post10's wheel
// (torch_npu/include/acl/acl_rt.h, torch_npu/include/profiling/aprof_pub.h), the newest public
// headers of the same functions; older wheels (2.7.1.post6) ship headers from before them.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// acl_rt.h: the launch call of the cpp_wrapper_npu.py launchers (acl_sim defines it).
#ifndef ACL_HOST_HAS_aclrtPlaceHolderInfo
typedef struct {
  uint32_t addrOffset;
  uint32_t dataOffset;
} aclrtPlaceHolderInfo;
#endif
#ifndef ACL_HOST_HAS_aclrtLaunchKernelWithHostArgs
aclError aclrtLaunchKernelWithHostArgs(aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream,
                                       aclrtLaunchKernelCfg *cfg, void *hostArgs, size_t argsSize,
                                       aclrtPlaceHolderInfo *placeHolderArray, size_t placeHolderNum);
#endif
#ifndef ACL_HOST_HAS_aclrtGetHardwareSyncAddr
aclError aclrtGetHardwareSyncAddr(void **addr);
#endif
#ifndef ACL_HOST_HAS_aclrtSynchronizeDeviceWithTimeout
aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout);
#endif
#ifndef ACL_HOST_HAS_aclrtStreamGetId
aclError aclrtStreamGetId(aclrtStream stream, int32_t *streamId);
#endif

// aprof_pub.h: the profiler services libtorch_npu.so imports (2.7.1.post6 ships no profiling header).
#ifndef ACL_HOST_HAS_MsprofSysCycleTime
uint64_t MsprofSysCycleTime(void);
#endif
#ifndef ACL_HOST_HAS_MsprofGetHashId
uint64_t MsprofGetHashId(const char *hashInfo, size_t length);
#endif
#ifndef ACL_HOST_HAS_MsprofReportApi
struct MsprofApi;
int32_t MsprofReportApi(uint32_t nonPersistantFlag, const struct MsprofApi *api);
#endif
#ifndef ACL_HOST_HAS_MsprofReportCompactInfo
int32_t MsprofReportCompactInfo(uint32_t nonPersistantFlag, void *const data, uint32_t length);
#endif
#ifndef ACL_HOST_HAS_MsprofReportAdditionalInfo
int32_t MsprofReportAdditionalInfo(uint32_t nonPersistantFlag, void *const data, uint32_t length);
#endif
#ifndef ACL_HOST_HAS_MsprofRegisterCallback
typedef int32_t (*ProfCommandHandle)(uint32_t type, void *data, uint32_t len);
int32_t MsprofRegisterCallback(uint32_t moduleId, ProfCommandHandle handle);
#endif

// op-api (libopapi.so / libnnopbase.so): what torch_npu's op-plugin calls for aclnnInplaceFillScalar,
// aclnnInplaceZero, aclnnMm, aclnnMatmul and aclnnInplaceCopy (host/opapi.cpp). The wheels from 2.7.1 on declare
// the tensor and scalar calls themselves, as op-plugin's function-pointer types (third_party/op-plugin/op_plugin/
// utils/op_api_common_base.h), turned into declarations by tooling/sim/host_library.py: those win. The rest is
// CANN's public op-api headers: aclnn/aclnn_base.h (aclnnStatus), aclnn/acl_meta.h (the opaque types,
// aclCreateTensor, aclCreateScalar, aclDestroyTensor, aclDestroyScalar), aclnnop/aclnn_fill_scalar.h and
// aclnnop/aclnn_zero.h (the two phases of each operator), prototypes as CANN's documentation gives them
// ("aclnnInplaceFillScalar", "aclnnInplaceZero", "aclCreateTensor"); the matrix multiplies' and the copy's below.
#ifndef ACL_HOST_HAS_aclnnStatus
typedef int32_t aclnnStatus;
#endif
#ifndef ACL_HOST_HAS_aclOpExecutor
typedef struct aclOpExecutor aclOpExecutor;
#endif
#ifndef ACL_HOST_HAS_aclTensor
typedef struct aclTensor aclTensor;
#endif
#ifndef ACL_HOST_HAS_aclScalar
typedef struct aclScalar aclScalar;
#endif
#ifndef ACL_HOST_HAS_aclCreateTensor
aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType, const int64_t *stride,
                           int64_t offset, aclFormat format, const int64_t *storageDims, uint64_t storageDimsNum,
                           void *tensorData);
#endif
#ifndef ACL_HOST_HAS_aclCreateScalar
aclScalar *aclCreateScalar(void *value, aclDataType dataType);
#endif
#ifndef ACL_HOST_HAS_aclDestroyTensor
aclnnStatus aclDestroyTensor(const aclTensor *tensor);
#endif
#ifndef ACL_HOST_HAS_aclDestroyScalar
aclnnStatus aclDestroyScalar(const aclScalar *scalar);
#endif
#ifndef ACL_HOST_HAS_aclnnInplaceFillScalarGetWorkspaceSize
aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclScalar *value, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor);
#endif
#ifndef ACL_HOST_HAS_aclnnInplaceFillScalar
aclnnStatus aclnnInplaceFillScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream);
#endif
#ifndef ACL_HOST_HAS_aclnnInplaceZeroGetWorkspaceSize
aclnnStatus aclnnInplaceZeroGetWorkspaceSize(aclTensor *selfRef, uint64_t *workspaceSize, aclOpExecutor **executor);
#endif
#ifndef ACL_HOST_HAS_aclnnInplaceZero
aclnnStatus aclnnInplaceZero(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
#endif
// aclnnop/aclnn_mm.h and aclnnop/aclnn_matmul.h (hicann/ops-nn matmul/mat_mul_v3/op_host/op_api/; CANN's
// "aclnnMm" and "aclnnMatmul" pages): what op-plugin's mm, mm.out, matmul and matmul_backward call.
#ifndef ACL_HOST_HAS_aclnnMmGetWorkspaceSize
aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out, int8_t cubeMathType,
                                    uint64_t *workspaceSize, aclOpExecutor **executor);
#endif
#ifndef ACL_HOST_HAS_aclnnMm
aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
#endif
#ifndef ACL_HOST_HAS_aclnnMatmulGetWorkspaceSize
aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                        int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
#endif
#ifndef ACL_HOST_HAS_aclnnMatmul
aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
#endif
// aclnnop/aclnn_copy.h (hicann/ops-math conversion/view_copy/op_api/aclnn_copy.h; CANN's "aclnnInplaceCopy" page):
// torch_npu's copy_ between tensors of one device (a strided host-to-device copy's last step too), clone, contiguous.
#ifndef ACL_HOST_HAS_aclnnInplaceCopyGetWorkspaceSize
aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src, uint64_t *workspaceSize,
                                             aclOpExecutor **executor);
#endif
#ifndef ACL_HOST_HAS_aclnnInplaceCopy
aclnnStatus aclnnInplaceCopy(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
#endif

#ifdef __cplusplus
}
#endif
