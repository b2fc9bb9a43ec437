"""GPU memory that two processes of different users share: CUDA's virtual memory API.

The harness allocates each GPU arena with ``cuMemCreate`` and exports it as
a file descriptor (``cuMemExportToShareableHandle``, POSIX fd handles); the
worker receives that descriptor over a Unix socket (SCM_RIGHTS) and maps the
same physical memory into its own address space. Unlike the runtime's
``cudaIpcOpenMemHandle`` (what ``torch.multiprocessing`` uses), which maps
memory only between processes of one user, a descriptor works across users,
so the worker can run as the unprivileged student user on a GPU as well.

Both sides wrap the mapping as a ``torch.uint8`` tensor through
``__cuda_array_interface__``; the tensor keeps the mapping alive, and the
mapping is unmapped and released when the last tensor viewing it is gone.
The driver frees the physical memory when both processes have released it.
"""

from __future__ import annotations

import ctypes
import os
import socket

import torch

_POSIX_FD = 1            # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1              # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1           # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3          # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_MINIMUM = 0


class VmmError(RuntimeError):
    pass


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_LIB = None


def _cuda():
    global _LIB
    if _LIB is None:
        torch.cuda.init()
        _LIB = ctypes.CDLL("libcuda.so.1")
    return _LIB


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(result, ctypes.byref(name))
        raise VmmError(f"{what} failed: {(name.value or b'?').decode()} ({result})")


def _device() -> int:
    """The CUdevice of torch's current device, with its primary context current on this thread."""
    ordinal = torch.cuda.current_device()
    torch.cuda.synchronize(ordinal)   # makes the primary context current here
    dev = ctypes.c_int()
    _check(_cuda().cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
    return dev.value


def _prop(dev: int) -> _Prop:
    prop = _Prop()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location = _Location(_ON_DEVICE, dev)
    return prop


class _Mapping:
    """One mapped allocation; unmapped and released when garbage collected."""

    def __init__(self, handle: int, nbytes: int, dev: int):
        lib = _cuda()
        self.handle, self.nbytes, self.ptr = handle, nbytes, 0
        ptr = ctypes.c_uint64()
        _check(lib.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                                       ctypes.c_uint64(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        self.ptr = ptr.value
        _check(lib.cuMemMap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                            ctypes.c_ulonglong(handle), ctypes.c_ulonglong(0)), "cuMemMap")
        self.mapped = True
        access = _Access(_Location(_ON_DEVICE, dev), _READ_WRITE)
        _check(lib.cuMemSetAccess(ctypes.c_uint64(self.ptr), ctypes.c_size_t(nbytes),
                                  ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.ptr, False),
                                         "strides": None, "version": 2}

    def tensor(self) -> torch.Tensor:
        # torch keeps this object alive as long as the tensor (or a view of it) lives.
        return torch.as_tensor(self, device="cuda")

    def __del__(self):
        try:
            lib = _cuda()
            if self.ptr:
                if getattr(self, "mapped", False):
                    lib.cuMemUnmap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes))
                lib.cuMemAddressFree(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes))
            lib.cuMemRelease(ctypes.c_ulonglong(self.handle))
        except Exception:   # at interpreter exit the driver may be gone already
            pass


class Shared:
    """A new shareable GPU buffer of at least ``nbytes`` bytes (the harness's side)."""

    def __init__(self, nbytes: int):
        lib = _cuda()
        dev = _device()
        prop = _prop(dev)
        gran = ctypes.c_size_t()
        _check(lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop),
                                                 _GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity")
        self.nbytes = (max(nbytes, 1) + gran.value - 1) // gran.value * gran.value
        handle = ctypes.c_ulonglong()
        _check(lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(self.nbytes), ctypes.byref(prop),
                               ctypes.c_ulonglong(0)), "cuMemCreate")
        self._mapping = _Mapping(handle.value, self.nbytes, dev)
        self.tensor = self._mapping.tensor()[:nbytes]

    def send(self, sock: socket.socket) -> None:
        """Send a descriptor of this memory over a Unix socket (one per call; the peer imports it)."""
        fd = ctypes.c_int(-1)
        _check(_cuda().cuMemExportToShareableHandle(ctypes.byref(fd), ctypes.c_ulonglong(self._mapping.handle),
                                                    _POSIX_FD, ctypes.c_ulonglong(0)),
               "cuMemExportToShareableHandle")
        try:
            socket.send_fds(sock, [b"m"], [fd.value])
        finally:
            os.close(fd.value)


def receive(sock: socket.socket, nbytes: int) -> torch.Tensor:
    """Map the memory whose descriptor arrives next on ``sock`` (the worker's side)."""
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if len(fds) != 1:
        raise VmmError("expected one file descriptor for a GPU arena")
    fd = fds[0]
    try:
        dev = _device()
        handle = ctypes.c_ulonglong()
        _check(_cuda().cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
               "cuMemImportFromShareableHandle")
    finally:
        os.close(fd)
    size = ctypes.c_size_t()
    # The exporter rounded the size up to the granularity; map all of it, view nbytes.
    prop = _prop(dev)
    _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(size), ctypes.byref(prop),
                                                 _GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity")
    full = (max(nbytes, 1) + size.value - 1) // size.value * size.value
    return _Mapping(handle.value, full, dev).tensor()[:nbytes]
