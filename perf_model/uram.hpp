// URAM weight store of one PU: capacity, tile layout, and what fits statically.
//
// Each PU has 64 URAMs (4096 x 72 bit) in one column; SA row r reads URAM r.  A weight tile is
// an R_SA x M block (one row-block of the GEMM weight matrix); it occupies ceil(M / C_SA)
// consecutive entries in every URAM, each entry holding the C_SA weights that row r multiplies
// in one fast cycle.  The tile's bias byte of row r sits in the spare (ECC) byte of the tile's
// first entry in URAM r.  PU1x (C_SA = 4) splits each URAM into two 32-bit sub-regions, so its
// logical entry space is 2 x 4096 entries of 4 weights: the same 2 MiB as PU2x.  Logical entry e
// lies in word e / 2, sub-region e % 2: a tile's consecutive entries pair into whole words, so the
// write side fills a word per write (pu_config.hpp) while the read side selects one half.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "perf_model/pu_config.hpp"

namespace aimcemu {

// Entries one tile with M weights per row needs in every URAM.
inline std::int64_t uram_tile_entries(const PuConfig& pu, std::int64_t m) {
    return (m + pu.weights_per_entry() - 1) / pu.weights_per_entry();
}
// Logical entries per URAM (the scheduler's memory capacity).
inline std::int64_t uram_capacity_entries(const PuConfig& pu) { return pu.entries_per_row(); }
// Weight bytes the URAM store can hold (excluding the spare bias byte).
inline std::int64_t uram_capacity_bytes(const PuConfig& pu) {
    return uram_capacity_entries(pu) * pu.weights_per_entry() * pu.r_sa;
}

// Physical place of one byte in the URAM column.
struct UramLocation {
    int uram = 0;        // 0..uram_count-1
    int entry = 0;       // physical address 0..uram_entries-1
    int bit_offset = 0;  // 0..71: weights in bits [0, 64), bias in [64, 72)
    bool operator==(const UramLocation&) const = default;
};

// Where weight (row, k) of a tile starting at logical entry `base` lives.  Throws FormatError if
// the tile runs past the store's capacity.
UramLocation uram_weight_location(const PuConfig& pu, std::int64_t base, int row, std::int64_t k, std::int64_t m);
// Where the bias byte of `row` of a tile starting at logical entry `base` lives.
UramLocation uram_bias_location(const PuConfig& pu, std::int64_t base, int row);

// One GEMM layer's weight footprint on a PU.
struct LayerFootprint {
    int layer = -1;
    std::string name;
    std::int64_t tiles = 0;           // ceil(N / R_SA)
    std::int64_t entries_per_tile = 0;
    std::int64_t entries = 0;         // tiles * entries_per_tile
    bool fits_statically = false;     // placed by the static (in-order, first-fit) allocation
};

struct StaticFitReport {
    std::int64_t capacity_entries = 0;
    std::int64_t total_entries = 0;   // all layers together
    std::int64_t static_entries = 0;  // entries of the layers that fit statically
    std::vector<LayerFootprint> layers;
    bool all_fit() const { return total_entries <= capacity_entries; }
};

// Static allocation in network order: a layer is placed whole if it still fits in what the
// earlier static layers left; the others must be loaded dynamically by the scheduler.
// `m_of_layer[i]` is the per-row weight count each GEMM layer stores (the timing model's padded
// M), `n_tiles[i]` its tile count; layers with n_tiles == 0 are skipped.
StaticFitReport uram_static_fit(const PuConfig& pu, const std::vector<std::string>& names,
                                const std::vector<std::int64_t>& m_of_layer, const std::vector<std::int64_t>& n_tiles,
                                std::int64_t budget_entries = -1);

}  // namespace aimcemu
