// Compiling the functions of one kernel file for an instruction set beyond the build's baseline.
//
// Why a pragma pair and not per-file compiler flags: a kernel file's functions may use AVX2 or
// AVX-512 instructions, while everything else (and the code that picks a kernel at run time after
// a CPU check) stays baseline x86-64, so that one binary runs on any x86-64 CPU.  Flags per file
// would also let the compiler use the wider ISA in inline functions of shared headers, whose
// baseline copies the linker may then discard in favour of the wide ones.
//
//     #include "common/isa_target.hpp"
//     AIMCEMU_ISA_BEGIN("avx2,fma")
//     ... kernels: only called after the CPU has been checked for every listed feature ...
//     AIMCEMU_ISA_END()
//
// GCC: push_options + target.  GCC 12's AVX-512 intrinsic headers start several intrinsics from
// a self-initialised "undefined" vector (the unused merge operand), which -Wmaybe-uninitialized
// reports at every inlined use, a known false positive of those headers; the warning is silenced
// inside the region only.  Clang (the fuzz build) has no `#pragma GCC target`: its twin is an
// attribute pushed onto every function of the region.
#pragma once

#define AIMCEMU_PRAGMA(text) _Pragma(#text)

#if defined(__clang__)
#define AIMCEMU_ISA_BEGIN(isa) \
    AIMCEMU_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define AIMCEMU_ISA_END() AIMCEMU_PRAGMA(clang attribute pop)
#else
#define AIMCEMU_ISA_BEGIN(isa)                  \
    AIMCEMU_PRAGMA(GCC push_options)            \
    AIMCEMU_PRAGMA(GCC target(isa))             \
    AIMCEMU_PRAGMA(GCC diagnostic push)         \
    AIMCEMU_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized")
#define AIMCEMU_ISA_END()               \
    AIMCEMU_PRAGMA(GCC diagnostic pop)  \
    AIMCEMU_PRAGMA(GCC pop_options)
#endif
