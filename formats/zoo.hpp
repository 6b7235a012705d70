// Built-in network topologies with deterministic synthetic weights (for timing and benchmarks).
//
// ResNet-18 and ResNet-50 at 224x224x3 as in He et al. 2016.  The paper's ResNet-50 is the
// original v1 (stride on the first 1x1 conv of a downsampling bottleneck); v1.5 (torchvision's,
// stride on the 3x3) is a choice.  Weights come from pcg32(seed) and are for shape/timing work;
// shifts are chosen so that activations keep a useful dynamic range.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/network.hpp"

namespace aimcemu::zoo {

enum class ResNetVariant { V1, V1_5 };

Network resnet18(std::uint64_t seed = 1, int image_size = 224, int num_classes = 1000);
Network resnet50(ResNetVariant variant = ResNetVariant::V1, std::uint64_t seed = 1, int image_size = 224,
                 int num_classes = 1000);

// Names accepted by by_name: "resnet18", "resnet50" (v1), "resnet50v1.5".
Network by_name(const std::string& name, std::uint64_t seed = 1);
std::vector<std::string> names();

}  // namespace aimcemu::zoo
