"""The C ABI of qnnemu's two embedded libraries: the function tables, the marshalling of C
structs, and the handle boundary (docs/architecture.md).

libQnnHtpEmu.so (QnnInterface.h, ``QnnInterface_getProviders``) -- table assembly in
``entry.py``, the library object and shared helpers in ``library.py``; one module per QNN
component:

=====================================  ===================================================
QNN component (header)                 module
=====================================  ===================================================
QnnLog.h                               ``log_api``
QnnBackend.h, QnnProperty.h,           ``backend_api``
QnnGlobalConfig.h
QnnBackend.h op packages               ``op_package_api``
QnnDevice.h, HTP/QnnHtpDevice.h        ``device_api`` (custom config layouts: ``device_config``)
HTP/QnnHtpPerfInfrastructure.h         ``perf_api`` (functions handed out by deviceGetInfrastructure)
QnnContext.h lifecycle and configs     ``context_lifecycle_api``
QnnContext.h context binaries          ``context_api``
QnnContext.h binary sections,          ``section_api``
QnnTensor.h tensor updates
QnnGraph.h                             ``graph_api``
QnnGraph.h graphValidate               ``validate_api``
QnnTensor.h tensor creation            ``tensor_api``
QnnMem.h                               ``mem_api``
QnnProfile.h                           ``profile_api``
QnnSignal.h                            ``signal_api``
QnnError.h                             ``error_api``
LPAI/QnnLpai*.h (libQnnLpaiEmu.so's    ``lpai_api``
table on the same core)
QnnTypes.h structs (tensors, ops,      ``marshal``
quantization, scalars, configs)
=====================================  ===================================================

libQnnSystem.so (System/QnnSystemInterface.h, ``QnnSystemInterface_getProviders``):
``system_entry`` (System log, profile serialization, System context, System tensor; the DLC
entries answer UNSUPPORTED_FEATURE).

Both libraries are built on ``framework`` (the entry decorator, install, failure logging,
errorGetMessage texts, handle decoding, the bounded validation primitives and the one
Qnn_DataType_t -> Qnn_Scalar_t table); their C side is one shim body, csrc/abi_shim.h.
"""
