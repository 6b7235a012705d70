// A software model of the AMX tile instructions that the AMX kernel (gemm_amx.cpp) uses.
//
// Why: the AMX kernel runs only on CPUs with AMX-INT8, and most machines that build and test this
// project have none, so its blocking, its packed-weight layout and its edge handling would go
// untested there.  tests/CMakeLists.txt compiles gemm_amx.cpp a second time with
// AIMCEMU_AMX_TILE_MODEL defined, which includes this file: the tile intrinsics then run on the
// model below, and the GEMM and inference tests run the `amx` kernel bit for bit against their
// independent references on any CPU with AVX-512BW (the kernel's epilogue still uses it).  The
// product never includes this file.
//
// The model follows the instruction set reference's pseudo-code for palette 1: eight tiles of at
// most 16 rows of 64 bytes, each with the rows and bytes per row that the last LDTILECFG gave it.
// TDPBSSD adds, for every row m of the destination and every 32-bit column n, the four products
// of signed bytes A[m][4k + i] x B[k][4n + i] over k and i, wrapping in 32 bits (no saturation).
// An operation whose tiles' shapes do not fit together, or a tile used before a configuration,
// faults on the hardware (#UD or #GP); the model aborts with a message instead, so that a kernel
// that would fault there cannot pass a test here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// The intrinsic headers define these four as macros over builtins that need the AMX target; the
// functions below take their place (the two inline-function intrinsics, _tile_loadconfig and
// _tile_release, are hidden by the declarations of the same names in this namespace instead).
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbssd

namespace aimcemu::detail {

struct AmxTileFile {
    static constexpr int kTiles = 8, kMaxRows = 16, kMaxBytesPerRow = 64;
    bool configured = false;
    std::uint8_t rows[kTiles] = {};
    std::uint16_t bytes_per_row[kTiles] = {};
    std::uint8_t data[kTiles][kMaxRows][kMaxBytesPerRow] = {};
};

// Each thread has its own tiles, as each core has on the hardware.
inline thread_local AmxTileFile amx_tile_file;

[[noreturn]] inline void amx_model_fault(const char* what) {
    std::fprintf(stderr, "AMX tile model: %s (the hardware would fault)\n", what);
    std::abort();
}

inline void amx_model_check_tile(int tile) {
    if (!amx_tile_file.configured) amx_model_fault("tile used before a tile configuration was loaded");
    if (tile < 0 || tile >= AmxTileFile::kTiles) amx_model_fault("no such tile");
    if (amx_tile_file.rows[tile] == 0) amx_model_fault("tile not configured (0 rows)");
}

// LDTILECFG: a 64-byte block: byte 0 the palette, bytes 16-47 the bytes per row of tiles 0-15
// (16-bit each), bytes 48-63 the rows of tiles 0-15.  Loading a configuration zeroes every tile.
inline void _tile_loadconfig(const void* config) {
    const auto* block = static_cast<const std::uint8_t*>(config);
    if (block[0] != 1) amx_model_fault("palette other than 1");
    for (int b = 1; b < 16; ++b)   // start_row and the reserved bytes
        if (block[b] != 0) amx_model_fault("non-zero start row or reserved byte in the tile configuration");
    for (int t = AmxTileFile::kTiles; t < 16; ++t)   // palette 1 has 8 tiles: the rest must be zero
        if (block[16 + 2 * t] != 0 || block[17 + 2 * t] != 0 || block[48 + t] != 0)
            amx_model_fault("tile beyond palette 1's eight configured");
    AmxTileFile& file = amx_tile_file;
    file = AmxTileFile{};
    for (int t = 0; t < AmxTileFile::kTiles; ++t) {
        std::uint16_t bytes = 0;
        std::memcpy(&bytes, block + 16 + 2 * t, sizeof bytes);
        const std::uint8_t rows = block[48 + t];
        if (rows > AmxTileFile::kMaxRows || bytes > AmxTileFile::kMaxBytesPerRow || (rows == 0) != (bytes == 0))
            amx_model_fault("tile shape beyond palette 1's limits");
        file.rows[t] = rows;
        file.bytes_per_row[t] = bytes;
    }
    file.configured = true;
}

// TILERELEASE: back to the initial state (no configuration).
inline void _tile_release() { amx_tile_file = AmxTileFile{}; }

inline void _tile_zero(int tile) {
    amx_model_check_tile(tile);
    std::memset(amx_tile_file.data[tile], 0, sizeof amx_tile_file.data[tile]);
}

// TILELOADD: row r from base + r * stride, the tile's bytes per row of it.
inline void _tile_loadd(int tile, const void* base, long stride) {
    amx_model_check_tile(tile);
    AmxTileFile& file = amx_tile_file;
    std::memset(file.data[tile], 0, sizeof file.data[tile]);
    for (int r = 0; r < file.rows[tile]; ++r)
        std::memcpy(file.data[tile][r], static_cast<const std::uint8_t*>(base) + r * stride, file.bytes_per_row[tile]);
}

// TILESTORED: the tile's rows to base + r * stride.
inline void _tile_stored(int tile, void* base, long stride) {
    amx_model_check_tile(tile);
    const AmxTileFile& file = amx_tile_file;
    for (int r = 0; r < file.rows[tile]; ++r)
        std::memcpy(static_cast<std::uint8_t*>(base) + r * stride, file.data[tile][r], file.bytes_per_row[tile]);
}

// TDPBSSD dst += a x b (signed bytes, groups of four, int32 accumulators).  The shapes must fit:
// dst and a have the same rows, b has a row per four bytes of a's rows, dst and b the same width.
inline void _tile_dpbssd(int dst, int a, int b) {
    amx_model_check_tile(dst);
    amx_model_check_tile(a);
    amx_model_check_tile(b);
    AmxTileFile& file = amx_tile_file;
    if (dst == a || dst == b || a == b) amx_model_fault("TDPBSSD with a tile named twice");
    if (file.rows[dst] != file.rows[a] || file.bytes_per_row[a] != 4 * file.rows[b] ||
        file.bytes_per_row[dst] != file.bytes_per_row[b] || file.bytes_per_row[dst] % 4 != 0)
        amx_model_fault("TDPBSSD operand shapes do not fit");
    const int groups = file.bytes_per_row[a] / 4, columns = file.bytes_per_row[dst] / 4;
    // b's bytes widened and transposed to [group][i][column] first, so that the inner loop runs
    // over contiguous columns (the tests' networks issue millions of these).
    std::uint32_t b_wide[AmxTileFile::kMaxRows][4][AmxTileFile::kMaxBytesPerRow / 4];
    for (int k = 0; k < groups; ++k)
        for (int n = 0; n < columns; ++n)
            for (int i = 0; i < 4; ++i)
                b_wide[k][i][n] = std::uint32_t(std::int32_t(std::int8_t(file.data[b][k][4 * n + i])));
    for (int m = 0; m < file.rows[dst]; ++m) {
        std::uint32_t sums[AmxTileFile::kMaxBytesPerRow / 4];
        std::memcpy(sums, file.data[dst][m], sizeof(std::uint32_t) * std::size_t(columns));
        for (int k = 0; k < groups; ++k)
            for (int i = 0; i < 4; ++i) {
                // unsigned arithmetic wraps in 32 bits, as the hardware's adders do
                const std::uint32_t a_byte = std::uint32_t(std::int32_t(std::int8_t(file.data[a][m][4 * k + i])));
                for (int n = 0; n < columns; ++n) sums[n] += a_byte * b_wide[k][i][n];
            }
        std::memcpy(file.data[dst][m], sums, sizeof(std::uint32_t) * std::size_t(columns));
    }
}

}  // namespace aimcemu::detail
