"""Which x86 instructions a llama.cpp build may use here: those the CPU has *and* the operating system enables.

llama.cpp's default build (`GGML_NATIVE=ON`) compiles for whatever CPUID advertises. A virtual machine may advertise
what its hypervisor does not let a program run: on one cloud VM, CPUID says AMX, and the native build died with
SIGILL on `tilezero` at the first token. So the binding is built with `GGML_NATIVE=OFF` and explicit instruction
sets, each named only when

- the CPU has it (Linux's /proc/cpuinfo flags), and
- the kernel manages the register state it needs (`arch_prctl(ARCH_GET_XCOMP_SUPP)`: the XSAVE features the OS
  enables; the YMM state for AVX, the opmask and ZMM states for AVX-512).

AMX is left out on purpose: its tiles need a per-process permission that some hypervisors grant without backing
it, and ggml uses it only to read prompts of a few quantisation types. A build is still accepted only once it has
answered a token (app/clients/llamacpp/probe.py), whatever these checks say.

Only x86-64 Linux is described here; elsewhere (a Mac's Metal, ARM) llama.cpp's own choice stands.
"""

from __future__ import annotations

import ctypes
import platform
from pathlib import Path

# XSAVE state components (Intel SDM vol. 1, 13.1): what each group of registers needs the OS to save.
_YMM = 1 << 2
_AVX512_STATE = (1 << 5) | (1 << 6) | (1 << 7)  # opmask, ZMM_Hi256, Hi16_ZMM
_ARCH_GET_XCOMP_SUPP = 0x1021
_SYS_ARCH_PRCTL_X86_64 = 158

# llama.cpp's CMake options and the cpuinfo flags each one needs (GGML_AVX512 compiles -mavx512f/cd/vl/dq/bw).
_BASE = {"GGML_SSE42": {"sse4_2"}, "GGML_AVX": {"avx"}, "GGML_F16C": {"f16c"}, "GGML_FMA": {"fma"},
         "GGML_AVX2": {"avx2"}, "GGML_BMI2": {"bmi2"}, "GGML_AVX_VNNI": {"avx_vnni"}}
_AVX512 = {"GGML_AVX512": {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"},
           "GGML_AVX512_VBMI": {"avx512vbmi", "avx512f"}, "GGML_AVX512_VNNI": {"avx512_vnni", "avx512f"},
           "GGML_AVX512_BF16": {"avx512_bf16", "avx512f"}}
_NEEDS_YMM = {"GGML_AVX", "GGML_F16C", "GGML_FMA", "GGML_AVX2", "GGML_AVX_VNNI"}
ALWAYS_OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's flags as Linux lists them (empty where there is no such file)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def os_xsave_features() -> int | None:
    """The XSAVE state components the kernel enables for processes; None where it cannot be asked (not x86-64
    Linux, or a kernel before 5.16)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mask = ctypes.c_uint64(0)
        if libc.syscall(_SYS_ARCH_PRCTL_X86_64, _ARCH_GET_XCOMP_SUPP, ctypes.byref(mask)) != 0:
            return None
        return int(mask.value)
    except (OSError, AttributeError):
        return None


def build_options(flags: set[str], xsave: int | None) -> dict[str, bool]:
    """GGML_* options for a portable build: every instruction set above on or off. Without an answer from the
    kernel (`xsave` None) cpuinfo alone decides: Linux drops the AVX and AVX-512 flags itself when it does not
    enable their registers, which older kernels did not let a program ask."""
    ymm = xsave is None or bool(xsave & _YMM)
    zmm = ymm and (xsave is None or xsave & _AVX512_STATE == _AVX512_STATE)
    options = {"GGML_NATIVE": False}
    for name, needs in _BASE.items():
        options[name] = needs <= flags and (ymm or name not in _NEEDS_YMM)
    for name, needs in _AVX512.items():
        options[name] = zmm and needs <= flags
    for name in ALWAYS_OFF:
        options[name] = False
    return options


def cmake_args(user_args: str = "") -> str:
    """CMAKE_ARGS for building llama-cpp-python here: the user's own first, then the instruction sets, unless the
    user chose the CPU build already (GGML_NATIVE or a GGML_AVX* of their own) or this is no x86-64 Linux."""
    if "GGML_NATIVE" in user_args or "GGML_AVX" in user_args or platform.machine() not in ("x86_64", "AMD64") \
            or platform.system() != "Linux":
        return user_args.strip()
    options = build_options(cpu_flags(), os_xsave_features())
    ours = " ".join(f"-D{name}={'ON' if on else 'OFF'}" for name, on in options.items())
    return f"{user_args.strip()} {ours}".strip()


def describe(args: str) -> str:
    """The instruction sets a CMAKE_ARGS string turns on, for people: "AVX2, AVX-512, AVX-512 VNNI"."""
    names = {"GGML_AVX2": "AVX2", "GGML_AVX_VNNI": "AVX-VNNI", "GGML_AVX512": "AVX-512",
             "GGML_AVX512_VBMI": "AVX-512 VBMI", "GGML_AVX512_VNNI": "AVX-512 VNNI", "GGML_AVX512_BF16": "AVX-512 BF16"}
    on = [label for option, label in names.items() if f"-D{option}=ON" in args]
    if "GGML_NATIVE" not in args:
        return "llama.cpp's own choice of instructions"
    return ", ".join(on) or "SSE4.2 and below"
