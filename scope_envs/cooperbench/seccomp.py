"""A seccomp filter that refuses new user namespaces to a sandboxed process and its descendants.

An unprivileged user who can create a user namespace gains every capability inside it, and with
them much more of the kernel to attack; no test run or agent command needs one. The filter
answers `unshare` and `clone` with `CLONE_NEWUSER` in their flags with EPERM and `clone3`
(whose flags sit in memory a filter cannot read) with ENOSYS, on which the C library falls
back to `clone`. System calls of another architecture (32-bit ones on x86-64) are refused.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

CLONE_NEWUSER = 0x10000000
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
X32_SYSCALL_BIT = 0x40000000

# machine: (audit architecture, clone, unshare, clone3)
ARCHITECTURES = {
    "x86_64": (0xC000003E, 56, 272, 435),
    "aarch64": (0xC00000B7, 220, 97, 435),
}

_LOAD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # offsets in struct seccomp_data (little-endian: low half of args[0] first)


class _Program(ctypes.Structure):
    _fields_ = [("length", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _instruction(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program() -> bytes | None:
    """The BPF program for this machine, or None where the architecture is not known here."""
    known = ARCHITECTURES.get(platform.machine())
    if known is None:
        return None
    arch, clone, unshare, clone3 = known
    deny, nosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    return b"".join(
        [
            _instruction(_LOAD, _ARCH),
            _instruction(_JEQ, arch, jt=1),  # 1
            _instruction(_RET, deny),  # another architecture
            _instruction(_LOAD, _NR),  # 3
            _instruction(_JGE, X32_SYSCALL_BIT, jt=7),  # 4: x32 system calls -> deny (12)
            _instruction(_JEQ, clone3, jt=7),  # 5 -> ENOSYS (13)
            _instruction(_JEQ, unshare, jt=2),  # 6 -> flags (9)
            _instruction(_JEQ, clone, jt=1),  # 7 -> flags (9)
            _instruction(_RET, _ALLOW),  # 8
            _instruction(_LOAD, _ARG0_LOW),  # 9
            _instruction(_JSET, CLONE_NEWUSER, jt=1),  # 10 -> deny (12)
            _instruction(_RET, _ALLOW),  # 11
            _instruction(_RET, deny),  # 12
            _instruction(_RET, nosys),  # 13
        ]
    )


class UserNamespaceFilter:
    """The filter, prepared in the parent so that the child only makes one system call."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        program = filter_program()
        self.libc = libc
        self.buffer = ctypes.create_string_buffer(program) if program is not None else None
        self.program = _Program(len(program) // 8, ctypes.addressof(self.buffer)) if self.buffer else None

    @property
    def available(self) -> bool:
        return self.program is not None

    def install(self) -> None:
        """Installs the filter in the calling process; `no_new_privs` (or root) must come first."""
        if self.program is None:
            return
        if self.libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self.program), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "installing the seccomp filter failed")
