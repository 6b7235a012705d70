// The structure record of a handed-over model: see model_handover.hpp.
//
// Layout (host byte order: both processes are the same build on the same machine): the tag; the
// network's name, input shape (3 x int32), input_frac_bits, output_layer (int32), class names
// (uint32 count, then each string); uint32 layer count, then per layer its name, kind (uint8),
// model_fields::kInts and kWindow (int32 each), kFlags (uint8 each) and, for a GEMM layer, its
// weight count (uint64) and its bias (uint32 count, then the bytes).  A string is a uint32 length
// and its bytes.
#include "formats/model_handover.hpp"

#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "common/errors.hpp"
#include "formats/model_fields.hpp"

namespace aimcemu {

namespace {

class RecordWriter {
public:
    template <class T>
    void put(T value) {
        static_assert(std::is_trivially_copyable_v<T>);
        bytes_.append(reinterpret_cast<const char*>(&value), sizeof(T));
    }
    void put_string(std::string_view text) {
        put(std::uint32_t(text.size()));
        bytes_.append(text);
    }
    void put_bytes(std::string_view raw) { bytes_.append(raw); }
    std::string take() { return std::move(bytes_); }

private:
    std::string bytes_;
};

class RecordReader {
public:
    RecordReader(std::string_view bytes, const std::string& path) : bytes_(bytes), path_(path) {}
    template <class T>
    T get() {
        T value;
        std::memcpy(&value, take(sizeof(T)).data(), sizeof(T));
        return value;
    }
    std::string get_string() { return std::string(take(get<std::uint32_t>())); }
    // A count of items of at least `min_item_bytes` each: no more than the bytes left can hold, so
    // that a damaged count is refused before anything is reserved for it.
    std::size_t get_count(std::size_t min_item_bytes) {
        const std::uint32_t count = get<std::uint32_t>();
        if (count > bytes_.size() / min_item_bytes) fail("a count runs past the end");
        return count;
    }
    std::string_view take(std::size_t count) {
        if (count > bytes_.size()) fail("it ends early");
        const std::string_view part = bytes_.substr(0, count);
        bytes_.remove_prefix(count);
        return part;
    }
    bool done() const { return bytes_.empty(); }
    [[noreturn]] void fail(const std::string& why) const {
        throw FormatError(path_, "file", "the file check handed over a damaged model (" + why + ")");
    }

private:
    std::string_view bytes_;
    const std::string& path_;
};

constexpr std::size_t kMinLayerBytes = sizeof(std::uint32_t) + 1 + std::size(model_fields::kInts) * 4 +
                                       std::size(model_fields::kWindow) * 4 + std::size(model_fields::kFlags);

void put_layer(RecordWriter& out, const Layer& l) {
    out.put_string(l.name);
    out.put(std::uint8_t(l.kind));
    for (const auto& f : model_fields::kInts) out.put(std::int32_t(l.*(f.member)));
    for (const auto& f : model_fields::kWindow) out.put(std::int32_t(l.window.*(f.member)));
    for (const auto& f : model_fields::kFlags) out.put(std::uint8_t(l.*(f.member) ? 1 : 0));
}

Layer get_layer(RecordReader& in) {
    Layer l;
    l.name = in.get_string();
    const auto kind = in.get<std::uint8_t>();
    if (kind > std::uint8_t(LayerKind::AvgPool)) in.fail("unknown layer kind " + std::to_string(kind));
    l.kind = LayerKind(kind);
    for (const auto& f : model_fields::kInts) {
        const std::int32_t v = in.get<std::int32_t>();
        if (v < f.lo || v > f.hi) in.fail(std::string(f.name) + " out of range");
        l.*(f.member) = v;
    }
    for (const auto& f : model_fields::kWindow) l.window.*(f.member) = in.get<std::int32_t>();
    for (const auto& f : model_fields::kFlags) {
        const auto flag = in.get<std::uint8_t>();
        if (flag > 1) in.fail(std::string(f.name) + " is not a flag");
        l.*(f.member) = flag == 1;
    }
    return l;
}

}  // namespace

std::string encode_model_structure(const Network& net, const std::vector<std::uint64_t>& weight_counts) {
    RecordWriter out;
    out.put_bytes(kModelStructureTag);
    out.put_string(net.name);
    for (const int d : {net.input_shape.h, net.input_shape.w, net.input_shape.c}) out.put(std::int32_t(d));
    out.put(std::int32_t(net.input_frac_bits));
    out.put(std::int32_t(net.output_layer));
    out.put(std::uint32_t(net.class_names.size()));
    for (const auto& name : net.class_names) out.put_string(name);
    out.put(std::uint32_t(net.layers.size()));
    std::size_t gemm = 0;
    for (const auto& l : net.layers) {
        put_layer(out, l);
        if (!l.is_gemm()) continue;
        if (gemm == weight_counts.size()) throw std::logic_error("encode_model_structure: a weight count per GEMM layer");
        out.put(std::uint64_t(weight_counts[gemm++]));
        out.put_string(std::string_view(reinterpret_cast<const char*>(l.bias.data()), l.bias.size()));
    }
    if (gemm != weight_counts.size()) throw std::logic_error("encode_model_structure: a weight count per GEMM layer");
    return out.take();
}

Network decode_model_structure(std::string_view structure, std::span<const std::int8_t> weights,
                               const std::string& path) {
    RecordReader in(structure, path);
    if (in.take(std::min(structure.size(), kModelStructureTag.size())) != kModelStructureTag)
        in.fail("not a structure record of this version of aimcemu");
    Network net;
    net.name = in.get_string();
    net.input_shape.h = in.get<std::int32_t>();
    net.input_shape.w = in.get<std::int32_t>();
    net.input_shape.c = in.get<std::int32_t>();
    net.input_frac_bits = in.get<std::int32_t>();
    net.output_layer = in.get<std::int32_t>();
    net.class_names.resize(in.get_count(sizeof(std::uint32_t)));
    for (auto& name : net.class_names) name = in.get_string();
    net.layers.resize(in.get_count(kMinLayerBytes));
    for (auto& l : net.layers) {
        l = get_layer(in);
        if (!l.is_gemm()) continue;
        const auto count = in.get<std::uint64_t>();
        if (count > weights.size()) in.fail("its weights run past the " + std::to_string(weights.size()) + " handed over");
        l.weights.assign(weights.begin(), weights.begin() + std::ptrdiff_t(count));
        weights = weights.subspan(count);
        const std::string_view bias = in.take(in.get<std::uint32_t>());
        l.bias.assign(reinterpret_cast<const std::int8_t*>(bias.data()),
                      reinterpret_cast<const std::int8_t*>(bias.data()) + bias.size());
    }
    if (!in.done()) in.fail("bytes after the last layer");
    if (!weights.empty()) in.fail(std::to_string(weights.size()) + " weights handed over that no layer takes");
    return net;
}

}  // namespace aimcemu
