// The model a checking process read, handed over whole to the process that loads it
// (check_model_in_helper, formats/untrusted_file.hpp).
//
// The checking process reads every field of the model file, the GEMM layers' weights straight
// into a memory file; everything else the file holds (the network's and each layer's fields and
// the biases) follows the weights there as one structure record, encoded here.  The loading
// process then reads nothing of the file itself: it decodes the record, copies the weights out
// and runs the graph checks (Network::resolve).  Why: reading the fields again through HDF5 cost
// the loading process as much as the checking process's whole read (about 12 ms for ResNet-50's
// 1,400-odd attributes), and a file rewritten in place between the two reads would have reached
// this process's libhdf5 unchecked.
//
// The record comes from another process, one that a hostile file may have damaged: decoding
// checks every length and count against the bytes there are and refuses a record that is cut
// short, runs on, or holds a value no model file can (FormatError naming the model file and the
// field "file"); it never reads past the bytes it is given.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/network.hpp"

namespace aimcemu {

// The first bytes of every record: a checking process of another version is refused by name.
inline constexpr std::string_view kModelStructureTag = "aimcemu-model-structure 1\n";

// `net`'s every field but the GEMM layers' weights, whose counts (one per GEMM layer, in layer
// order) are `weight_counts`; the layers' in and out shapes are not recorded (resolve fills them).
std::string encode_model_structure(const Network& net, const std::vector<std::uint64_t>& weight_counts);

// The network `structure` records, each GEMM layer's weights copied in order from `weights`, which
// the record must use up exactly.  Not resolved.  Throws FormatError(path, "file", ...) on a
// record that is not one encode_model_structure writes.
Network decode_model_structure(std::string_view structure, std::span<const std::int8_t> weights,
                               const std::string& path);

}  // namespace aimcemu
