// AMX (Advanced Matrix Extensions) micro-kernel of the fast GEMM (see gemm.hpp).
//
// Compiled for AMX-INT8 through a target pragma and entered only after detail::cpu_has_amx()
// (CPUID plus the Linux permission request for tile data) said yes; like gemm_vnni.cpp it uses
// no standard-library templates.  tdpbssd multiplies signed by signed bytes and accumulates
// groups of four products into int32 without saturation, so no operand offset is needed and the
// result is the exact sum whenever it fits int32.
//
// Blocking: 2 x 2 accumulator tiles = 32 output pixels x 32 output channels; per 64-deep step two
// A tiles (16 pixel rows x 64 bytes, loaded straight from the IM2COL operand with its row stride)
// and two B tiles (16 groups of 4 depth positions x 16 channels x 4 bytes, from the packed
// weights).  Edges (P or N not a multiple of 32) go through small zero-padded scratch buffers.
//
// Tests also compile this file with AIMCEMU_AMX_TILE_MODEL defined: the tile instructions then run
// on a software model (amx_tile_model.hpp), so the kernel is tested on CPUs without AMX.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "pu_model/gemm.hpp"
#include "common/isa_target.hpp"

#ifdef AIMCEMU_AMX_TILE_MODEL
#include "pu_model/amx_tile_model.hpp"
#endif

namespace aimcemu::detail {

#ifndef AIMCEMU_AMX_TILE_MODEL
bool cpu_has_amx() {
    static const bool available = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
        const bool tile = edx & (1u << 24), int8 = edx & (1u << 25);
        if (!tile || !int8 || !cpu_has_vnni512()) return false;
        // Linux hands out the 8 KiB tile-data state only on request (ARCH_REQ_XCOMP_PERM = 0x1023,
        // XFEATURE_XTILEDATA = 18); it then holds for every thread of the process.
        return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    }();
    return available;
}
#else
// On the tile model the kernel needs only what its epilogue uses.
bool cpu_has_amx() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#endif

}  // namespace aimcemu::detail

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
#ifndef AIMCEMU_AMX_TILE_MODEL
AIMCEMU_ISA_BEGIN("avx512f,avx512bw,amx-tile,amx-int8")
#else
AIMCEMU_ISA_BEGIN("avx512f,avx512bw")
#endif

namespace aimcemu::detail {
namespace {

struct alignas(64) TileConfig {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {};
    std::uint8_t rows[16] = {};
};

void load_tile_config() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {   // tiles 0-3 accumulators, 4-5 activations, 6-7 weights
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

// acc block (32 x 32 int32, row stride 32) = X rows [x, x + 32 * ldx) times one 32-channel block.
void block_32x32(const std::int8_t* x, std::int64_t ldx, const std::int8_t* w_block, std::int64_t steps,
                 std::int32_t* out) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (std::int64_t s = 0; s < steps; ++s) {
        const std::int8_t* b = w_block + s * 16 * 128;   // 16 groups x (2 vectors x 64 bytes)
        _tile_loadd(4, x + s * 64, ldx);
        _tile_loadd(5, x + 16 * ldx + s * 64, ldx);
        _tile_loadd(6, b, 128);
        _tile_loadd(7, b + 64, 128);
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, out, 128);
    _tile_stored(1, out + 16, 128);
    _tile_stored(2, out + 16 * 32, 128);
    _tile_stored(3, out + 16 * 32 + 16, 128);
}

}  // namespace

void amx_gemm_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                   const std::int8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                   std::int32_t* acc, std::int8_t* scratch) {
    const std::int64_t depth = (m + 63) / 64 * 64;   // == ldx
    const std::int64_t steps = depth / 64;
    alignas(64) std::int32_t block[32 * 32];
    load_tile_config();
    for (std::int64_t p0 = p_begin; p0 < p_end; p0 += 32) {
        const std::int64_t rows = p_end - p0 < 32 ? p_end - p0 : 32;
        const std::int8_t* x = xt + p0 * ldx;
        if (rows < 32) {   // the tile reads 32 rows: copy the tail into zeroed scratch
            std::memset(scratch, 0, std::size_t(32 * ldx));
            std::memcpy(scratch, x, std::size_t(rows * ldx));
            x = scratch;
        }
        for (std::int64_t n0 = 0; n0 < n; n0 += 32) {
            block_32x32(x, ldx, packed + n0 * depth, steps, block);
            const std::int64_t cols = n - n0 < 32 ? n - n0 : 32;
            const __mmask16 lo = __mmask16(cols >= 16 ? 0xFFFF : (1u << cols) - 1u);
            const __mmask16 hi = __mmask16(cols <= 16 ? 0 : (cols >= 32 ? 0xFFFF : (1u << (cols - 16)) - 1u));
            const __m512i col_lo = _mm512_loadu_si512(column + n0);
            const __m512i col_hi = _mm512_loadu_si512(column + n0 + 16);
            for (std::int64_t r = 0; r < rows; ++r) {
                std::int32_t* dst = acc + (p0 + r) * n + n0;
                _mm512_mask_storeu_epi32(dst, lo, _mm512_add_epi32(_mm512_load_si512(block + r * 32), col_lo));
                _mm512_mask_storeu_epi32(dst + 16, hi,
                                         _mm512_add_epi32(_mm512_load_si512(block + r * 32 + 16), col_hi));
            }
        }
    }
    _tile_release();
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
