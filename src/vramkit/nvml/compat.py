"""The parts of nvidia-ml-py's `pynvml` namespace that the simulator must mirror.

The simulator runs in two modes. Inside vram it does not import pynvml at all (that import
costs ~35 ms of the ~100 ms budget of `vram status`), so it uses these mirrors: the same
constant values, the same NVMLError class names and the same `NVMLError(code)` -> subclass
mapping. Inside the shim (`vram sim shim`) it uses the real pynvml classes instead.
"""

from __future__ import annotations

import string
import sys

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_COMPUTEMODE_DEFAULT = 0
NVML_COMPUTEMODE_PROHIBITED = 2
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
NVML_NVLINK_MAX_LINKS = 36
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_MEMORY_TEMP = 82
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeNone = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlMemory_v2 = 0x02000028

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_IN_USE: "In Use",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_NO_DATA: "No Data",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


class NVMLLibraryMismatchError(Exception):
    pass


def _make_error_classes() -> None:
    # Same naming rule as pynvml: NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost.
    module = sys.modules[__name__]
    for name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(name[len("NVML_ERROR_"):], "_").replace("_", "")
        code = getattr(module, name)

        def new(cls: type[NVMLError], *args: object, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        cls = type(class_name, (NVMLError,), {"__new__": new})
        cls.__module__ = __name__
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[code] = cls


_make_error_classes()


class FriendlyObject:
    """Plain attribute bag, like pynvml.nvmlFriendlyObject (what process lists return)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"FriendlyObject({self.__dict__})"


# Result structs, by the same names and positional fields as pynvml's ctypes structures.
class _Struct:
    _fields_: tuple[str, ...] = ()

    def __init__(self, *values: Any) -> None:
        # pynvml's structures hand out text fields as str, though the C fields are bytes.
        for name, value in zip(self._fields_, values):
            setattr(self, name, value.decode() if isinstance(value, bytes) else value)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n, None)!r}" for n in self._fields_)
        return f"{type(self).__name__}({inner})"


class c_nvmlMemory_t(_Struct):
    _fields_ = ("total", "free", "used")


class c_nvmlMemory_v2_t(_Struct):
    _fields_ = ("version", "total", "reserved", "free", "used")


class c_nvmlUtilization_t(_Struct):
    _fields_ = ("gpu", "memory")


class c_nvmlProcessUtilizationSample_t(_Struct):
    _fields_ = ("pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil")


class c_nvmlBAR1Memory_t(_Struct):
    _fields_ = ("bar1Total", "bar1Free", "bar1Used")


class nvmlPciInfo_t(_Struct):
    _fields_ = ("busIdLegacy", "domain", "bus", "device", "pciDeviceId", "pciSubSystemId", "busId")


class c_nvmlEventData_t(_Struct):
    """One event from nvmlEventSetWait: the device's handle, the event type and its data (the XID)."""

    _fields_ = ("device", "eventType", "eventData", "gpuInstanceId", "computeInstanceId")


class c_nvmlValue_t:
    """The value union of a field value: the simulator fills ullVal."""

    def __init__(self) -> None:
        self.ullVal = self.uiVal = 0


class c_nvmlFieldValue_t:
    """One answer of nvmlDeviceGetFieldValues, by pynvml's field names."""

    def __init__(self) -> None:
        self.fieldId = self.scopeId = self.timestamp = self.latencyUsec = self.valueType = self.nvmlReturn = 0
        self.value = c_nvmlValue_t()


def nvmlFriendlyObject(fields: dict[str, Any]) -> FriendlyObject:
    return FriendlyObject(**fields)
