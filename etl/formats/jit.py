"""Loops compiled at run time: LLVM IR text -> machine code in this process (llvmlite, LLVM's
JIT), for the per-record byte work no installed library does a column at a time.

Why LLVM IR and not C: a fresh machine has Python and pip, no compiler; llvmlite is a wheel.
Each module's code is compiled once per process (~0.05-0.1 s), by whichever thread asks first,
and called through ctypes, which releases the GIL for the call. x86-64 with SSE 4.2 only (the
loops use its crc32 instruction; every x86 server CPU since 2008): elsewhere, or if llvmlite
cannot load or compile, `compile_ir` returns None and callers take their NumPy/Arrow path,
which gives the same bytes.
"""

from __future__ import annotations

import functools
import logging
import platform
import threading
from typing import Any

log = logging.getLogger(__name__)

COMPILED_FROM = 16384  # records: a shorter column is not worth a compile (~0.05-0.1 s a process)


class Compiled:
    """The named functions of one compiled module, kept with the engine that owns their code."""

    def __init__(self, engine: Any, functions: dict[str, Any]):
        self._engine = engine  # the machine code lives as long as the engine does
        self.functions = functions


def compile_ir(ir: str, signatures: tuple[tuple[str, type], ...]) -> Compiled | None:
    """`ir` compiled for this CPU, its functions as ctypes callables ((name, CFUNCTYPE) each),
    or None where it cannot be (see the module's docstring). Cached per (ir, signatures)."""
    with _compiling:
        return _compile(ir, signatures)


_compiling = threading.Lock()


@functools.lru_cache(maxsize=64)
def _compile(ir: str, signatures: tuple[tuple[str, type], ...]) -> Compiled | None:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        features = llvm.get_host_cpu_features()
        if not features.get("sse4.2"):
            log.info("the CPU has no SSE 4.2: compiled loops off, NumPy/Arrow paths used")
            return None
        machine = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=features.flatten(), opt=3)
        module = llvm.parse_assembly(ir)
        module.verify()
        # LLVM's -O3 pipeline: inlines the small helpers, unrolls the constant-length copies
        builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(3))
        builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
        return Compiled(engine, {name: signature(engine.get_function_address(name))
                                 for name, signature in signatures})
    except Exception as error:  # noqa: BLE001 - any failure here means: take the other path
        log.info("compiled loops unavailable (%s): NumPy/Arrow paths used", error)
        return None
