"""NVML, the NVIDIA driver's management library, behind one error mapping and one probe.

Every NVML call goes through :func:`nvml_errors`, the one place where ``pynvml.NVMLError`` codes
become batchscope errors: a reading the device or driver cannot give at all (``NOT_SUPPORTED``,
``FUNCTION_NOT_FOUND`` on an old driver, ``NO_PERMISSION``) becomes :class:`ProbeUnsupportedError`,
whose series is then NaN for the whole trial with the reason recorded once; anything else (GPU lost,
driver timeout, unknown) becomes :class:`ProbeError`, which leaves a gap in that one sample.

NVML is initialised once per parent process (:func:`session`), never per trial: ``nvmlInit`` costs
tens of milliseconds and would otherwise sit in every trial's start-up.

``pynvml`` (from nvidia-ml-py, a dependency of the parent, not of a framework's environment) is imported on the first
NVML call (:func:`nvml_errors` makes sure of it), never by importing this module: a module a worker might import
does not make its interpreter need nvidia-ml-py, and a parent that reads no GPU does not pay for it. Where it is not
installed the call raises :class:`ProbeError` saying so, as a machine without a driver does.

Tests patch the module-level name ``harness.monitor.nvml.pynvml`` (``autospec=True``, real constants), as
Zeus does, so no GPU is needed to test this module.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from harness.errors import PartialReadingError, ProbeError, ProbeUnsupportedError
from harness.monitor.fields import NVML_FIELDS

if TYPE_CHECKING:  # bound at run time by the first NVML call (_pynvml), as this module's ``pynvml``
    import pynvml

MIB = 1024.0 * 1024.0
NAN = math.nan

#: The sample fields the NVML probe fills (units in the names).

#: NVML answers that will not change during a run: the reading is switched off with this reason.
_UNSUPPORTED_NAMES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NO_PERMISSION")

F = TypeVar("F", bound=Callable[..., Any])


def _pynvml() -> Any:
    """The ``pynvml`` module, imported on first use and kept as this module's ``pynvml`` (what tests patch).

    Raises:
        ProbeError: it is not installed in this interpreter.
    """
    cached = globals().get("pynvml")
    if cached is not None:
        return cached
    try:
        import pynvml as lib  # from nvidia-ml-py: a driver binding, not a framework
    except ImportError as e:
        raise ProbeError(f"NVML cannot be read: pynvml is not installed in {sys.executable} "
                         "(pip install nvidia-ml-py)") from e
    globals()["pynvml"] = lib
    return lib


def __getattr__(name: str) -> Any:
    """``harness.monitor.nvml.pynvml`` before the first NVML call (a test patches it): imported then."""
    if name == "pynvml":
        try:
            return _pynvml()
        except ProbeError as e:
            raise AttributeError(str(e)) from e
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def nvml_errors(func: F) -> F:
    """Decorator: the one place that maps ``pynvml.NVMLError`` to :class:`ProbeError` (see module doc); it imports
    ``pynvml`` first, so the function it wraps finds it as this module's ``pynvml``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        lib = _pynvml()
        try:
            return func(*args, **kwargs)
        except lib.NVMLError as e:
            code = getattr(e, "value", None)
            unsupported = {getattr(lib, name, None) for name in _UNSUPPORTED_NAMES}
            cls = ProbeUnsupportedError if code in unsupported else ProbeError
            raise cls(f"NVML {func.__name__.lstrip('_')}: {e}") from e

    return wrapper  # type: ignore[return-value]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------ the process-wide session
_lock = threading.Lock()
_initialised = False


@nvml_errors
def _init() -> None:
    pynvml.nvmlInit()


def ensure_initialised() -> None:
    """Initialise NVML once for this process (shut down at exit). Raises :class:`ProbeError` when
    there is no driver or library (the message says which)."""
    global _initialised
    with _lock:
        if _initialised:
            return
        _init()
        _initialised = True
        atexit.register(shutdown)


def shutdown() -> None:
    """Release NVML (safe to call when it was never initialised)."""
    global _initialised
    with _lock:
        if not _initialised:
            return
        _initialised = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass  # shutting down a library that is already gone: nothing left to release


# ------------------------------------------------------------------ devices
@nvml_errors
def device_count() -> int:
    """How many GPUs NVML sees."""
    return int(pynvml.nvmlDeviceGetCount())


@nvml_errors
def _handle_by_index(index: int) -> Any:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


@nvml_errors
def _handle_by_uuid(uuid: str) -> Any:
    return pynvml.nvmlDeviceGetHandleByUUID(uuid)


@nvml_errors
def _name(handle: Any) -> str:
    return _text(pynvml.nvmlDeviceGetName(handle))


@nvml_errors
def _uuid(handle: Any) -> str:
    return _text(pynvml.nvmlDeviceGetUUID(handle))


@nvml_errors
def _pci_bus_id(handle: Any) -> str:
    return _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)


@nvml_errors
def _memory_total_mib(handle: Any) -> float:
    return float(pynvml.nvmlDeviceGetMemoryInfo(handle).total) / MIB


@nvml_errors
def _driver_version() -> str:
    return _text(pynvml.nvmlSystemGetDriverVersion())


@nvml_errors
def _cuda_driver_version() -> str:
    cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
    return f"{cuda // 1000}.{(cuda % 1000) // 10}"


def device_facts() -> list[dict[str, Any]]:
    """Index, name, total memory and driver of every GPU (NVML must be initialised)."""
    driver = _driver_version()
    try:
        cuda = _cuda_driver_version()
    except ProbeError:
        cuda = "unknown"
    out = []
    for i in range(device_count()):
        h = _handle_by_index(i)
        ident = device_identity(h)
        out.append({"index": i, "name": _name(h), "memory_total_mib": _memory_total_mib(h), "driver": driver,
                    "cuda_driver": cuda, "uuid": ident["uuid"], "pci_bus_id": ident["pci_bus_id"]})
    return out


#: the order CUDA numbers GPUs in for every worker (harness/run/executor.py sets it): the PCI bus order, which
#: :func:`cuda_index_handle` follows. CUDA's default, FASTEST_FIRST, may number them otherwise than NVML does.
CUDA_DEVICE_ORDER = "PCI_BUS_ID"


def cuda_index_handle(index: int) -> tuple[Any, int]:
    """(NVML handle, NVML index) of CUDA device ``index`` under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: the GPU with the
    ``index``-th lowest PCI bus id. NVML's own indices need not follow that order, so they are not assumed to.
    Raises :class:`ProbeError` when there is no such GPU."""
    count = device_count()
    if index >= count:
        raise ProbeError(f"CUDA device {index} does not exist: NVML sees {count} GPU(s)")
    handles = [(_pci_bus_id(h).upper(), i, h) for i, h in ((i, _handle_by_index(i)) for i in range(count))]
    _, nvml_index, handle = sorted(handles, key=lambda t: t[0])[index]
    return handle, nvml_index


def device_identity(handle: Any) -> dict[str, Any]:
    """Name, UUID and PCI bus id of one GPU (each None where NVML will not say): what names it in the store."""
    out: dict[str, Any] = {}
    for key, read in (("name", _name), ("uuid", _uuid), ("pci_bus_id", _pci_bus_id)):
        try:
            out[key] = read(handle)
        except ProbeError:
            out[key] = None
    return out


def worker_device(env: Mapping[str, str] | None = None) -> tuple[Any, str] | None:
    """(handle, label) of the GPU a worker uses as its first CUDA device, or None when CUDA_VISIBLE_DEVICES
    hides every GPU. Frameworks use the first visible device; CUDA_VISIBLE_DEVICES may name it by index (CUDA's,
    in PCI bus order: :func:`cuda_index_handle`) or UUID. The label names the GPU by its UUID. Raises
    :class:`ProbeError` when the device cannot be had."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        first = "0"
    else:
        first = visible.split(",")[0].strip()
        if first in ("", "-1", "none", "NoDevFiles"):
            return None
    if first.isdigit():
        handle, nvml_index = cuda_index_handle(int(first))
        label = f"GPU {first}" + (f" (NVML index {nvml_index})" if nvml_index != int(first) else "")
    elif first.startswith(("GPU-", "MIG-")):
        handle = _handle_by_uuid(first)
        label = first
    else:
        raise ProbeError(f"CUDA_VISIBLE_DEVICES={visible!r}: cannot tell which GPU the worker uses")
    ident = device_identity(handle)
    uuid = f", {ident['uuid']}" if ident["uuid"] and ident["uuid"] != label else ""
    return handle, f"{label} ({ident['name']}{uuid})"


# ------------------------------------------------------------------ the probe
#: ``NvmlProbe.unsupported`` key while no sample has found a process of the worker's tree in NVML's list
NO_PID_KEY = "process_memory"
NO_PID_NOTE = ("NVML listed no process of the worker's tree on this GPU (in a container NVML may list the host's "
               "PIDs): per-process GPU memory unknown")

@nvml_errors
def _utilization(handle: Any) -> tuple[float, float]:
    u = pynvml.nvmlDeviceGetUtilizationRates(handle)
    return float(u.gpu), float(u.memory)


@nvml_errors
def _memory_v2(handle: Any) -> tuple[float, float]:
    # v2 reports driver-reserved memory separately, so "used" is what allocations really hold
    m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    return float(m.used) / MIB, float(m.total) / MIB


@nvml_errors
def _memory_v1(handle: Any) -> tuple[float, float]:
    m = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return float(m.used) / MIB, float(m.total) / MIB


@nvml_errors
def _processes(handle: Any) -> list[Any]:
    return list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))


@nvml_errors
def _power_mw(handle: Any) -> float:
    return float(pynvml.nvmlDeviceGetPowerUsage(handle))


@nvml_errors
def _total_energy_consumption(handle: Any) -> int:
    return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))  # mJ since the driver loaded (Volta+)


@nvml_errors
def _sm_clock_mhz(handle: Any) -> float:
    return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))


@nvml_errors
def _temperature_c(handle: Any) -> float:
    return float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))


@dataclass
class NvmlProbe:
    """Reads one GPU through NVML. Call :func:`ensure_initialised` first (once per process).

    A reading NVML does not support on this device is switched off at its first refusal (its fields
    stay NaN, ``unsupported`` says why); a reading that fails otherwise raises :class:`ProbeError`
    after the rest of the sample was read, so one failing call costs one gap, not the sample.
    """

    handle: Any
    label: str = "GPU"
    name: str = "nvml"
    fields: tuple[str, ...] = NVML_FIELDS
    unsupported: dict[str, str] = field(default_factory=dict)
    _memory_reader: Callable[[Any], tuple[float, float]] = _memory_v2
    _pid_matched: bool = False  # a sample found a process of the worker's tree in NVML's list

    def read(self, pids: frozenset[int]) -> dict[str, float]:
        """One reading of every field; ``pids`` is the worker's process tree (for its GPU memory)."""
        out = dict.fromkeys(self.fields, NAN)
        errors: list[str] = []

        def take(key: str, reader: Callable[[], Any]) -> Any:
            if key in self.unsupported:
                return None
            try:
                return reader()
            except ProbeUnsupportedError as e:
                self.unsupported[key] = str(e)
            except ProbeError as e:
                errors.append(str(e))
            return None

        util = take("utilization", lambda: _utilization(self.handle))
        if util is not None:
            out["gpu_util_pct"], out["gpu_mem_util_pct"] = util
        mem = take("memory", self._memory)
        if mem is not None:
            out["gpu_mem_used_mib"], out["gpu_mem_total_mib"] = mem
        procs = take("processes", lambda: _processes(self.handle))
        if procs is not None:
            out["proc_gpu_mem_mib"] = self._tree_memory_mib(procs, pids)
        power = take("power", lambda: _power_mw(self.handle))
        if power is not None:
            out["power_w"] = power / 1000.0
        energy = take("energy", lambda: _total_energy_consumption(self.handle))
        if energy is not None:
            out["energy_mj"] = energy
        clock = take("sm_clock", lambda: _sm_clock_mhz(self.handle))
        if clock is not None:
            out["sm_clock_mhz"] = clock
        temp = take("temperature", lambda: _temperature_c(self.handle))
        if temp is not None:
            out["temperature_c"] = temp
        if errors:
            raise PartialReadingError("; ".join(dict.fromkeys(errors)), out)
        return out

    def _memory(self) -> tuple[float, float]:
        try:
            return self._memory_reader(self.handle)
        except ProbeUnsupportedError as e:
            if self._memory_reader is _memory_v1:
                raise
            # an old driver without nvmlDeviceGetMemoryInfo_v2: v1 counts reserved memory as used
            self.unsupported["memory_v2"] = f"{e}; using v1 (driver-reserved memory counted as used)"
            self._memory_reader = _memory_v1
            return self._memory_reader(self.handle)

    def _tree_memory_mib(self, procs: list[Any], pids: frozenset[int]) -> float:
        mine = [p for p in procs if int(p.pid) in pids]
        if not mine:
            # no process of the worker listed: before it made its CUDA context, or never, where NVML lists the PIDs
            # of another PID namespace (a container): unknown, not 0; noted until a sample finds one
            if not self._pid_matched:
                self.unsupported[NO_PID_KEY] = NO_PID_NOTE
            return NAN
        self._pid_matched = True
        self.unsupported.pop(NO_PID_KEY, None)
        if any(p.usedGpuMemory is None for p in mine):
            # NVML gives no per-process figure (Windows WDDM, or no permission for other users' processes)
            self.unsupported.setdefault("processes", "NVML reports no per-process memory for the worker")
            return NAN
        return float(sum(int(p.usedGpuMemory) for p in mine)) / MIB

    def close(self) -> None:
        """Nothing to release per trial: NVML stays initialised for the process."""
