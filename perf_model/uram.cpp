// URAM layout and static fit (see uram.hpp).
#include "perf_model/uram.hpp"

#include "common/errors.hpp"

namespace aimcemu {

UramLocation uram_weight_location(const PuConfig& pu, std::int64_t base, int row, std::int64_t k, std::int64_t m) {
    if (row < 0 || row >= pu.r_sa) throw FormatError("<uram>", "row", "row " + std::to_string(row) + " outside the SA");
    if (k < 0 || k >= m) throw FormatError("<uram>", "k", "weight index outside the tile row");
    const std::int64_t entries = uram_tile_entries(pu, m);
    if (base < 0 || base + entries > uram_capacity_entries(pu))
        throw FormatError("<uram>", "base", "tile of " + std::to_string(entries) + " entries at " +
                                                std::to_string(base) + " exceeds the URAM capacity");
    const std::int64_t logical = base + k / pu.weights_per_entry();
    const int lane = int(k % pu.weights_per_entry());
    const int subregion = int(logical % pu.uram_subregions);
    UramLocation loc;
    loc.uram = row;
    loc.entry = int(logical / pu.uram_subregions);
    loc.bit_offset = subregion * pu.c_sa * 8 + lane * 8;
    return loc;
}

UramLocation uram_bias_location(const PuConfig& pu, std::int64_t base, int row) {
    if (row < 0 || row >= pu.r_sa) throw FormatError("<uram>", "row", "row " + std::to_string(row) + " outside the SA");
    if (base < 0 || base >= uram_capacity_entries(pu)) throw FormatError("<uram>", "base", "outside the URAM");
    return UramLocation{row, int(base / pu.uram_subregions), pu.uram_weight_bits};
}

StaticFitReport uram_static_fit(const PuConfig& pu, const std::vector<std::string>& names,
                                const std::vector<std::int64_t>& m_of_layer, const std::vector<std::int64_t>& n_tiles,
                                std::int64_t budget_entries) {
    if (names.size() != m_of_layer.size() || names.size() != n_tiles.size())
        throw FormatError("<uram>", "layers", "names, M and tile counts differ in length");
    StaticFitReport report;
    report.capacity_entries = budget_entries < 0 ? uram_capacity_entries(pu) : budget_entries;
    std::int64_t free_entries = report.capacity_entries;
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (n_tiles[i] <= 0) continue;
        LayerFootprint f;
        f.layer = int(i);
        f.name = names[i];
        f.tiles = n_tiles[i];
        f.entries_per_tile = uram_tile_entries(pu, m_of_layer[i]);
        f.entries = f.tiles * f.entries_per_tile;
        f.fits_statically = f.entries <= free_entries;
        if (f.fits_statically) {
            free_entries -= f.entries;
            report.static_entries += f.entries;
        }
        report.total_entries += f.entries;
        report.layers.push_back(f);
    }
    return report;
}

}  // namespace aimcemu
