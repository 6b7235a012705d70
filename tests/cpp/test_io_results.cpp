// The results writer: read back with the HDF5 C API and compare with what was written, the
// metrics with analysis/metrics.hpp, and check that failures never leave a file.
#include <gtest/gtest.h>
#include <hdf5_hl.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "common/h5.hpp"
#include "analysis/metrics.hpp"
#include "formats/results.hpp"
#include "common/errors.hpp"

namespace fs = std::filesystem;
using namespace aimcemu;

namespace {

constexpr std::size_t kImages = 3;

// conv 4x4x2 -> 4x4x3, max-pool -> 2x2x3, linear -> 4 classes.
Network small_network() {
    Network net;
    net.name = "small";
    net.input_shape = {4, 4, 2};
    Layer conv;
    conv.name = "conv";
    conv.window = Window::square(3, 1, 1);
    conv.out_channels = 3;
    conv.weights.assign(3 * 3 * 3 * 2, 1);
    conv.bias.assign(3, 0);
    Layer pool;
    pool.name = "pool";
    pool.kind = LayerKind::MaxPool;
    pool.input = 0;
    pool.window = Window::square(2, 2);
    Layer fc;
    fc.name = "fc";
    fc.kind = LayerKind::Linear;
    fc.input = 1;
    fc.out_channels = 4;
    fc.weights.assign(4 * 12, 1);
    fc.bias.assign(4, 0);
    net.layers = {conv, pool, fc};
    net.resolve();
    return net;
}

// Deterministic activations for `layer`; `round` < 0 is the reference, a round changes every
// (7 - round)-th element by round + 1.
std::vector<std::int8_t> activations(const Network& net, int layer, int round) {
    const std::size_t n = kImages * std::size_t(net.layers[std::size_t(layer)].out_shape.size());
    std::vector<std::int8_t> a(n);
    for (std::size_t i = 0; i < n; ++i) {
        int v = int((i * 29 + std::size_t(layer) * 11) % 200) - 100;
        if (round >= 0 && i % std::size_t(7 - round) == 0) v += round + 1;
        a[i] = std::int8_t(v);
    }
    return a;
}

class ResultsTest : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() / ("aimcemu_results_" + std::to_string(::getpid()) + "_" + info->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    std::size_t file_count() const {
        return std::size_t(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
    }

    ResultsSpec spec(std::size_t rounds) const {
        ResultsSpec s;
        s.config_json = R"({"seed": 3})";
        s.labels = {0, 3, 1};
        // The NIU round id repeats (as it does across chips and t); the round index must not.
        for (std::size_t r = 0; r < rounds; ++r)
            s.rounds.push_back({5, 7, 3600.0 * double(r + 1), r % 2 ? "global" : "none"});
        return s;
    }

    // Writes every reference and round of the small network.
    void write_all(ResultsWriter& w, const Network& net, std::size_t rounds) {
        for (int l = 0; l < 3; ++l) w.set_reference(l, activations(net, l, -1));
        for (std::size_t r = 0; r < rounds; ++r)
            for (int l = 0; l < 3; ++l) w.set_round(r, l, activations(net, l, int(r)));
    }

    fs::path dir_;
};

bool scale_on_every_axis(const h5::Dataset& ds) {
    for (unsigned axis = 0; axis < ds.dims().size(); ++axis)
        if (H5DSget_num_scales(ds.id(), axis) != 1) return false;
    return true;
}

std::int64_t argmax(const std::vector<std::int8_t>& v, std::size_t begin, std::size_t n) {
    return std::int64_t(std::max_element(v.begin() + std::ptrdiff_t(begin), v.begin() + std::ptrdiff_t(begin + n)) -
                        (v.begin() + std::ptrdiff_t(begin)));
}

}  // namespace

TEST_F(ResultsTest, ALayerNameHoldingANulByteIsRefusedBeforeAnythingIsWritten) {
    Network net = small_network();
    net.layers[0].name = std::string("stem\0x", 6);
    try {
        ResultsWriter w(path("r.h5"), net, spec(1));
        ADD_FAILURE() << "no error";
    } catch (const FormatError& e) {
        EXPECT_EQ(e.field(), "layers/0/name") << e.what();
    }
    EXPECT_EQ(file_count(), 0u);
}

TEST_F(ResultsTest, WritesActivationsMetricsPredictionsAndCoordinates) {
    const Network net = small_network();
    {
        ResultsWriter w(path("r.h5"), net, spec(2));
        write_all(w, net, 2);
        w.commit();
    }
    EXPECT_EQ(file_count(), 1u);
    const auto f = h5::File::open_read(path("r.h5"));
    EXPECT_EQ(f.read_attribute_string("format"), kResultsFormat);
    EXPECT_EQ(f.read_attribute_int("format_version"), kResultsFormatVersion);
    EXPECT_EQ(f.read_attribute_string("config"), R"({"seed": 3})");
    EXPECT_EQ(f.read_attribute_string("model"), "small");
    EXPECT_EQ(f.open_dataset("round").read<std::int64_t>(), (std::vector<std::int64_t>{0, 1}));
    EXPECT_EQ(f.open_dataset("chip").read<std::int64_t>(), (std::vector<std::int64_t>{7, 7}));
    EXPECT_EQ(f.open_dataset("t").read<double>(), (std::vector<double>{3600.0, 7200.0}));
    EXPECT_EQ(f.open_dataset("niu_round").read<std::int64_t>(), (std::vector<std::int64_t>{5, 5}));
    EXPECT_TRUE(f.open_dataset("drift_compensation").type().is_string);
    EXPECT_EQ(f.open_dataset("accuracy").read_attribute_string("coordinates"), "chip t niu_round drift_compensation");

    const auto layers = f.open_group("layers");
    EXPECT_EQ(layers.children_in_creation_order(), (std::vector<std::string>{"conv", "pool", "fc"}));
    for (int l = 0; l < 3; ++l) {
        const std::string name = net.layers[std::size_t(l)].name;
        SCOPED_TRACE(name);
        const auto g = layers.open_group(name);
        const Shape3 o = net.layers[std::size_t(l)].out_shape;
        const auto acts = g.open_dataset("activations");
        EXPECT_EQ(acts.dims(), (h5::Dims{2, kImages, hsize_t(o.h), hsize_t(o.w), hsize_t(o.c)}));
        EXPECT_TRUE(scale_on_every_axis(acts));
        EXPECT_TRUE(scale_on_every_axis(g.open_dataset("reference")));
        EXPECT_EQ(g.open_dataset("reference").read<std::int8_t>(), activations(net, l, -1));
        std::vector<std::int8_t> both = activations(net, l, 0);
        const auto r1 = activations(net, l, 1);
        both.insert(both.end(), r1.begin(), r1.end());
        EXPECT_EQ(acts.read<std::int8_t>(), both);
        const auto snr = g.open_dataset("snr_db").read<double>();
        const auto cos = g.open_dataset("cosine").read<double>();
        const auto mis = g.open_dataset("mismatch_rate").read<double>();
        for (int r = 0; r < 2; ++r) {
            const auto noisy = activations(net, l, r), ref = activations(net, l, -1);
            EXPECT_EQ(snr[std::size_t(r)], snr_db(noisy, ref));
            EXPECT_EQ(cos[std::size_t(r)], cosine_similarity(noisy, ref));
            EXPECT_EQ(mis[std::size_t(r)], mismatch_rate(noisy, ref));
        }
        EXPECT_EQ(g.read_attribute_int("out_shift"), net.layers[std::size_t(l)].out_shift);
        EXPECT_EQ(g.read_attribute_string("kind"), to_string(net.layers[std::size_t(l)].kind));
        EXPECT_FALSE(g.has_attribute("scale_factor"));  // xarray would apply it
    }

    // Predictions are the first maximum of the output layer; accuracy compares with labels.
    const auto labels = f.open_dataset("labels").read<std::int64_t>();
    const auto pred = f.open_dataset("predictions").read<std::int64_t>();
    const auto acc = f.open_dataset("accuracy").read<double>();
    ASSERT_EQ(pred.size(), 2 * kImages);
    for (int r = 0; r < 2; ++r) {
        const auto out = activations(net, 2, r);
        int correct = 0;
        for (std::size_t i = 0; i < kImages; ++i) {
            EXPECT_EQ(pred[std::size_t(r) * kImages + i], argmax(out, i * 4, 4));
            correct += pred[std::size_t(r) * kImages + i] == labels[i];
        }
        EXPECT_DOUBLE_EQ(acc[std::size_t(r)], correct / double(kImages));
    }
    const auto ref_out = activations(net, 2, -1);
    const auto ref_pred = f.open_dataset("reference_predictions").read<std::int64_t>();
    for (std::size_t i = 0; i < kImages; ++i) EXPECT_EQ(ref_pred[i], argmax(ref_out, i * 4, 4));
    EXPECT_EQ(f.open_dataset("logits").dims(), (h5::Dims{2, kImages, 4}));
}

// Commit closes the file and every object in it while the writer lives on (Python keeps it until
// garbage collection): an object left open keeps libhdf5's lock, and another copy of the library
// (h5py's) could not open the file.  The streamed logits dataset once stayed open so.
TEST_F(ResultsTest, CommitLeavesNoHdf5ObjectOpenWhileTheWriterLives) {
    const Network net = small_network();
    ResultsWriter w(path("r.h5"), net, spec(2));
    write_all(w, net, 2);
    w.commit();
    EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

TEST_F(ResultsTest, ActivationsAreChunkedAndDeflated) {
    const Network net = small_network();
    ResultsSpec s = spec(2);
    s.deflate_level = 3;
    ResultsWriter w(path("r.h5"), net, s);
    write_all(w, net, 2);
    w.commit();
    const auto f = h5::File::open_read(path("r.h5"));
    const auto acts = f.open_group("layers").open_dataset("conv/activations");
    h5::Handle dcpl(H5Dget_create_plist(acts.id()));
    EXPECT_EQ(H5Pget_layout(dcpl.id()), H5D_CHUNKED);
    hsize_t chunk[5];
    ASSERT_EQ(H5Pget_chunk(dcpl.id(), 5, chunk), 5);
    EXPECT_EQ(chunk[0], 1u);  // one round per chunk
    ASSERT_EQ(H5Pget_nfilters(dcpl.id()), 1);
    unsigned flags = 0, level = 0;
    std::size_t n_values = 1;
    EXPECT_EQ(H5Pget_filter2(dcpl.id(), 0, &flags, &n_values, &level, 0, nullptr, nullptr), H5Z_FILTER_DEFLATE);
    EXPECT_EQ(level, 3u);
}

TEST(ChooseChunk, StaysWithinTenKibToOneMibForLargeArrays) {
    // ResNet-50 conv1 output of 1000 images (one round of activations).
    const h5::Dims chunk = h5::choose_chunk({1000, 112, 112, 64}, 1);
    std::size_t bytes = 1;
    for (auto c : chunk) bytes *= c;
    EXPECT_GE(bytes, 10u * 1024);
    EXPECT_LE(bytes, 1024u * 1024);
    EXPECT_EQ(chunk[3], 64u);  // whole trailing axes
    EXPECT_EQ(h5::choose_chunk({3, 2, 2}, 1), (h5::Dims{3, 2, 2}));  // small arrays: one chunk
}

TEST_F(ResultsTest, DigitalRunHasOnlyTheReference) {
    const Network net = small_network();
    ResultsWriter w(path("r.h5"), net, spec(0));
    write_all(w, net, 0);
    w.commit();
    const auto f = h5::File::open_read(path("r.h5"));
    EXPECT_EQ(f.open_dataset("accuracy").dims(), h5::Dims{0});
    EXPECT_EQ(f.open_group("layers").open_dataset("conv/activations").dims(), (h5::Dims{0, kImages, 4, 4, 3}));
    EXPECT_EQ(f.open_group("layers").open_dataset("fc/snr_db").dims(), h5::Dims{0});
    EXPECT_EQ(f.open_dataset("reference_accuracy").read<double>().at(0), w.reference_accuracy());
}

// Without noisy rounds only stored layers and the output need a reference: the file is the
// same as when every reference is given, and a missing needed one names its field.
TEST_F(ResultsTest, ADigitalRunNeedsOnlyTheStoredAndTheOutputReferences) {
    const Network net = small_network();
    ResultsSpec s = spec(0);
    s.stored_layers = {"conv"};
    {
        ResultsWriter all(path("all.h5"), net, s);
        write_all(all, net, 0);
        all.commit();
    }
    ResultsWriter w(path("needed.h5"), net, s);
    EXPECT_TRUE(w.reference_needed(0));   // stored
    EXPECT_FALSE(w.reference_needed(1));  // neither stored nor the output
    EXPECT_TRUE(w.reference_needed(2));   // the output: predictions and accuracy
    w.set_reference(0, activations(net, 0, -1));
    w.set_reference(2, activations(net, 2, -1));
    w.commit();
    const auto a = h5::File::open_read(path("all.h5")), b = h5::File::open_read(path("needed.h5"));
    EXPECT_EQ(a.open_dataset("reference_predictions").read<std::int64_t>(),
              b.open_dataset("reference_predictions").read<std::int64_t>());
    EXPECT_EQ(a.open_dataset("reference_accuracy").read<double>(), b.open_dataset("reference_accuracy").read<double>());
    EXPECT_EQ(a.open_group("layers").open_dataset("conv/reference").read<std::int8_t>(),
              b.open_group("layers").open_dataset("conv/reference").read<std::int8_t>());

    ResultsWriter missing(path("missing.h5"), net, s);
    missing.set_reference(0, activations(net, 0, -1));
    try {
        missing.commit();
        ADD_FAILURE() << "commit without the output's reference";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("layers/fc/reference"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(path("missing.h5")));

    ResultsWriter noisy(path("noisy.h5"), net, spec(1));  // rounds compare with every layer's reference
    for (int l = 0; l < 3; ++l) EXPECT_TRUE(noisy.reference_needed(l)) << l;
}

TEST_F(ResultsTest, SelectedLayersOnlyStoreTheirActivations) {
    const Network net = small_network();
    ResultsSpec s = spec(1);
    s.stored_layers = {"fc"};
    ResultsWriter w(path("r.h5"), net, s);
    write_all(w, net, 1);
    w.commit();
    const auto layers = h5::File::open_read(path("r.h5")).open_group("layers");
    EXPECT_FALSE(layers.open_group("conv").has_link("activations"));
    EXPECT_FALSE(layers.open_group("conv").has_link("reference"));
    EXPECT_TRUE(layers.open_group("conv").has_link("snr_db"));  // metrics are always kept
    EXPECT_EQ(layers.open_group("conv").read_attribute_int("activations_stored"), 0);
    EXPECT_TRUE(layers.open_group("fc").has_link("activations"));
}

TEST_F(ResultsTest, UnknownLayerInSelectionIsAFormatError) {
    ResultsSpec s = spec(1);
    s.stored_layers = {"conv", "nope"};
    EXPECT_THROW(ResultsWriter(path("r.h5"), small_network(), s), FormatError);
    EXPECT_EQ(file_count(), 0u);
}

TEST_F(ResultsTest, AbandonedOrIncompleteWriterLeavesNoFile) {
    const Network net = small_network();
    {
        ResultsWriter w(path("r.h5"), net, spec(2));
        w.set_reference(0, activations(net, 0, -1));
        EXPECT_GT(file_count(), 0u);  // the temporary file exists while writing
    }
    EXPECT_EQ(file_count(), 0u);
    {
        ResultsWriter w(path("r.h5"), net, spec(1));
        for (int l = 0; l < 3; ++l) w.set_reference(l, activations(net, l, -1));
        w.set_round(0, 0, activations(net, 0, 0));
        EXPECT_THROW(w.commit(), FormatError);  // rounds of pool and fc missing
    }
    EXPECT_EQ(file_count(), 0u);
}

TEST_F(ResultsTest, BadInputsAreFormatErrors) {
    const Network net = small_network();
    ResultsWriter w(path("r.h5"), net, spec(1));
    EXPECT_THROW(w.set_round(0, 0, activations(net, 0, 0)), FormatError);  // reference not set yet
    EXPECT_THROW(w.set_reference(0, activations(net, 1, -1)), FormatError);  // wrong size
    EXPECT_THROW(w.set_reference(5, activations(net, 0, -1)), FormatError);
    w.set_reference(0, activations(net, 0, -1));
    EXPECT_THROW(w.set_round(1, 0, activations(net, 0, 0)), FormatError);  // only one round
}

TEST_F(ResultsTest, UnwritablePathIsAFormatErrorAndLeavesNoFile) {
    EXPECT_THROW(ResultsWriter(path("missing/r.h5"), small_network(), spec(1)), FormatError);
    EXPECT_THROW(ResultsWriter(dir_.string(), small_network(), spec(1)), FormatError);
    EXPECT_EQ(file_count(), 0u);
}

TEST_F(ResultsTest, RefusesAnUnnamedDriftCompensationAndLeavesNoFile) {
    const Network net = small_network();
    ResultsSpec s = spec(2);
    s.rounds[1].drift_compensation = "";
    EXPECT_THROW(ResultsWriter(path("bad.h5"), net, std::move(s)), FormatError);
    EXPECT_EQ(file_count(), 0u);
}

namespace {
// The reference of every layer of the small network, stored one image at a time from several
// threads in reverse image order (as a pass's micro-batches may arrive), then sealed.
std::shared_ptr<ReferenceActivations> shared_reference(const Network& net) {
    auto reference = std::make_shared<ReferenceActivations>(net, kImages, std::vector<bool>(3, true));
    std::vector<std::thread> workers;
    for (int l = 0; l < 3; ++l)
        workers.emplace_back([&, l] {
            const auto all = activations(net, l, -1);
            const std::size_t size = std::size_t(net.layers[std::size_t(l)].out_shape.size());
            for (std::size_t i = kImages; i-- > 0;)
                reference->store(l, std::int64_t(i), 1, {all.data() + i * size, size});
        });
    for (auto& t : workers) t.join();
    reference->seal();
    return reference;
}

std::vector<std::int8_t> dataset_bytes(const std::string& file, const std::string& name) {
    return h5::File::open_read(file).open_dataset(name).read<std::int8_t>();
}
}  // namespace

TEST_F(ResultsTest, ASharedReferenceWritesTheSameFileAsOneSetLayerByLayer) {
    const Network net = small_network();
    const auto reference = shared_reference(net);
    for (int l = 0; l < 3; ++l) {
        const auto span = reference->layer(l);
        EXPECT_EQ(std::vector<std::int8_t>(span.begin(), span.end()), activations(net, l, -1));
    }
    for (const char* name : {"copied.h5", "shared1.h5", "shared2.h5"}) {
        ResultsWriter w(path(name), net, spec(2));
        if (std::string(name) == "copied.h5") {
            for (int l = 0; l < 3; ++l) w.set_reference(l, activations(net, l, -1));
        } else {
            w.set_reference(reference);  // two writers share one reference: no copy
            EXPECT_EQ(w.reference(1).data(), reference->layer(1).data());
        }
        for (std::size_t r = 0; r < 2; ++r)
            for (int l = 0; l < 3; ++l) w.set_round(r, l, activations(net, l, int(r)));
        w.commit();
    }
    for (const char* dataset : {"reference_predictions", "predictions", "layers/pool/reference", "layers/fc/activations"})
        for (const char* name : {"shared1.h5", "shared2.h5"})
            EXPECT_EQ(dataset_bytes(path(name), dataset), dataset_bytes(path("copied.h5"), dataset)) << dataset;
    for (const char* name : {"shared1.h5", "shared2.h5"}) {
        const auto f = h5::File::open_read(path(name));
        EXPECT_EQ(f.open_dataset("layers/conv/snr_db").read<double>(),
                  h5::File::open_read(path("copied.h5")).open_dataset("layers/conv/snr_db").read<double>());
    }
}

TEST_F(ResultsTest, AReferenceChecksWhatIsStoredAndIsReadOnlyOnceSealed) {
    const Network net = small_network();
    ReferenceActivations partial(net, kImages, {true, false, true});
    EXPECT_FALSE(partial.holds(1));
    EXPECT_EQ(partial.bytes(), kImages * std::size_t(net.layers[0].out_shape.size() + net.layers[2].out_shape.size()));
    const auto conv = activations(net, 0, -1);
    partial.store(0, 0, int(kImages), conv);
    EXPECT_THROW(partial.layer(0), std::logic_error);   // not sealed yet
    EXPECT_THROW(partial.seal(), std::logic_error);     // layer 2 has no image yet
    EXPECT_THROW(partial.store(2, 2, 2, std::vector<std::int8_t>(2 * 4)), std::logic_error);  // past the last image
    EXPECT_THROW(partial.store(2, 0, 1, std::vector<std::int8_t>(3)), std::logic_error);      // not a whole image
    partial.store(1, 0, 1, std::vector<std::int8_t>(1));  // a layer not held is ignored
    partial.store(2, 0, int(kImages), activations(net, 2, -1));
    partial.seal();
    EXPECT_THROW(partial.store(0, 0, 1, {conv.data(), std::size_t(net.layers[0].out_shape.size())}), std::logic_error);
    EXPECT_THROW(partial.layer(1), std::logic_error);

    // A writer with noisy rounds needs every layer: a reference without the pool is refused, and
    // the writer is left as it was.
    auto shared = std::make_shared<ReferenceActivations>(net, kImages, std::vector<bool>{true, false, true});
    shared->store(0, 0, int(kImages), conv);
    shared->store(2, 0, int(kImages), activations(net, 2, -1));
    shared->seal();
    ResultsWriter w(path("r.h5"), net, spec(1));
    EXPECT_THROW(w.set_reference(shared), FormatError);
    EXPECT_THROW(w.reference(0), FormatError);
    // A digital run needs only the stored layers and the output.
    ResultsSpec digital = spec(0);
    digital.stored_layers = {"conv"};
    ResultsWriter d(path("d.h5"), net, digital);
    d.set_reference(shared);
    d.commit();
    EXPECT_EQ(dataset_bytes(path("d.h5"), "layers/conv/reference"), conv);
}

// A writer shares one reference: a second would drop its hold on the first, which its layers
// still read (refused, and the first stays what the file gets).
TEST_F(ResultsTest, AWriterRefusesASecondSharedReference) {
    const Network net = small_network();
    auto first = shared_reference(net);
    const std::int8_t* first_bytes = first->layer(1).data();
    ResultsWriter w(path("r.h5"), net, spec(1));
    w.set_reference(first);
    first.reset();  // the writer holds it now
    try {
        w.set_reference(shared_reference(net));
        ADD_FAILURE() << "a second shared reference was taken";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("field 'reference': this writer already shares a reference"),
                  std::string::npos) << e.what();
    }
    EXPECT_EQ(w.reference(1).data(), first_bytes);
    for (int l = 0; l < 3; ++l) w.set_round(0, l, activations(net, l, 0));
    w.commit();
    EXPECT_EQ(dataset_bytes(path("r.h5"), "layers/pool/reference"), activations(net, 1, -1));
}

// One pass at a time fills a reference: the claim is refused while another holds it and after
// sealing; a pass that fails gives it back with what it stored forgotten, so it can be filled again.
TEST_F(ResultsTest, AReferenceIsFilledByOnePassAtATime) {
    const Network net = small_network();
    ReferenceActivations reference(net, kImages, std::vector<bool>{true, false, false});
    const auto conv = activations(net, 0, -1);
    ASSERT_TRUE(reference.begin_filling());
    EXPECT_FALSE(reference.begin_filling());
    reference.store(0, 0, int(kImages), conv);
    reference.abandon_filling();                         // a failed pass
    EXPECT_THROW(reference.seal(), std::logic_error);    // what it stored is forgotten
    ASSERT_TRUE(reference.begin_filling());
    reference.store(0, 0, int(kImages), conv);
    reference.seal();
    EXPECT_FALSE(reference.begin_filling());
    reference.abandon_filling();                         // no effect once sealed
    EXPECT_TRUE(reference.sealed());
    const auto held = reference.layer(0);
    EXPECT_EQ(std::vector<std::int8_t>(held.begin(), held.end()), conv);
}

TEST_F(ResultsTest, LayerGroupsKeepTheirLinksInTheObjectHeader) {
    // Compact link storage (no fractal heap and B-trees per layer group) is what makes creating
    // the writer cheap; the links must still list in creation order.
    const Network net = small_network();
    {
        ResultsWriter w(path("r.h5"), net, spec(2));
        write_all(w, net, 2);
        w.commit();
    }
    const auto f = h5::File::open_read(path("r.h5"));
    const auto g = f.open_group("layers").open_group("conv");
    H5G_info_t info;
    ASSERT_GE(H5Gget_info(g.id(), &info), 0);
    EXPECT_EQ(info.storage_type, H5G_STORAGE_TYPE_COMPACT);
    EXPECT_GT(info.nlinks, 8u);  // more than HDF5's default compact limit
    const auto links = g.children_in_creation_order();
    EXPECT_EQ(std::vector<std::string>(links.begin(), links.begin() + 3), (std::vector<std::string>{"round", "chip", "t"}));
}

// Every file starts as a copy of a skeleton the writer built for the file's shape and keeps for
// the next file of that shape (formats/results.cpp).  What a run writes is its own: a later file
// of the same shape carries none of an earlier file's config, labels, values, series or
// attributes, and a file whose rounds have other coordinates (other t) shares the skeleton but
// carries its own coordinates in every group.
TEST_F(ResultsTest, FilesOfOneShapeShareASkeletonButNoneOfEachOthersValues) {
    const Network net = small_network();
    {
        ResultsWriter w(path("a.h5"), net, spec(2));
        write_all(w, net, 2);
        w.set_layer_series(0, "gain", std::vector<double>{1.5, 2.5});
        w.set_layer_attribute(0, "device", "aimc");
        w.commit();
    }
    ResultsSpec other = spec(2);
    other.config_json = R"({"seed": 4})";
    other.labels = {2, 2, 2};
    {
        ResultsWriter w(path("b.h5"), net, other);
        for (int l = 0; l < 3; ++l) w.set_reference(l, activations(net, l, 1));  // another reference
        for (std::size_t r = 0; r < 2; ++r)
            for (int l = 0; l < 3; ++l) w.set_round(r, l, activations(net, l, -1));
        w.commit();
    }
    ResultsSpec later_t = spec(2);
    later_t.rounds[1].t = 86400.0;
    {
        ResultsWriter w(path("c.h5"), net, later_t);
        write_all(w, net, 2);
        w.commit();
    }
    const auto b = h5::File::open_read(path("b.h5"));
    EXPECT_EQ(b.read_attribute_string("config"), R"({"seed": 4})");
    EXPECT_EQ(b.open_dataset("labels").read<std::int64_t>(), (std::vector<std::int64_t>{2, 2, 2}));
    const auto conv = b.open_group("layers").open_group("conv");
    EXPECT_FALSE(conv.has_link("gain"));
    EXPECT_FALSE(conv.has_attribute("device"));
    EXPECT_EQ(conv.open_dataset("reference").read<std::int8_t>(), activations(net, 0, 1));
    EXPECT_EQ(conv.open_dataset("snr_db").read<double>()[0], snr_db(activations(net, 0, -1), activations(net, 0, 1)));
    const auto out = activations(net, 2, 1);
    const auto ref_pred = b.open_dataset("reference_predictions").read<std::int64_t>();
    for (std::size_t i = 0; i < kImages; ++i) EXPECT_EQ(ref_pred[i], argmax(out, i * 4, 4));
    std::size_t correct = 0;
    for (std::size_t i = 0; i < kImages; ++i) correct += ref_pred[i] == 2;
    EXPECT_EQ(b.open_dataset("reference_accuracy").read<double>()[0], double(correct) / kImages);

    const auto a = h5::File::open_read(path("a.h5"));
    EXPECT_EQ(a.read_attribute_string("config"), R"({"seed": 3})");
    const auto a_conv = a.open_group("layers").open_group("conv");
    EXPECT_EQ(a_conv.open_dataset("gain").read<double>(), (std::vector<double>{1.5, 2.5}));
    EXPECT_EQ(a_conv.read_attribute_string("device"), "aimc");
    EXPECT_TRUE(scale_on_every_axis(a_conv.open_dataset("gain")));

    EXPECT_EQ(b.open_dataset("image").read<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
    EXPECT_EQ(conv.open_dataset("image").read<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
    EXPECT_EQ(conv.open_dataset("round").read<std::int64_t>(), (std::vector<std::int64_t>{0, 1}));
    EXPECT_EQ(conv.open_dataset("chip").read<std::int64_t>(), (std::vector<std::int64_t>{7, 7}));
    EXPECT_EQ(conv.open_dataset("channel").read<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
    const auto c = h5::File::open_read(path("c.h5"));
    EXPECT_EQ(c.open_dataset("t").read<double>(), (std::vector<double>{3600.0, 86400.0}));
    EXPECT_EQ(c.open_group("layers").open_group("pool").open_dataset("t").read<double>(),
              (std::vector<double>{3600.0, 86400.0}));
    EXPECT_EQ(a.open_dataset("t").read<double>(), (std::vector<double>{3600.0, 7200.0}));
}

// A run without noisy rounds may still give a layer a series (of no values): it is written, with
// the round coordinates, as in a run with rounds (a writer that skipped every per-layer dataset
// of a 0-round run's commit dropped it).
TEST_F(ResultsTest, ASeriesOfARunWithoutRoundsIsWrittenEmpty) {
    const Network net = small_network();
    for (int repeat = 0; repeat < 2; ++repeat) {
        {
            ResultsWriter w(path("r.h5"), net, spec(0));
            write_all(w, net, 0);
            w.set_layer_series(2, "drift_alpha", std::vector<double>{});
            w.commit();
        }
        const auto fc = h5::File::open_read(path("r.h5")).open_group("layers").open_group("fc");
        ASSERT_TRUE(fc.has_link("drift_alpha"));
        EXPECT_EQ(fc.open_dataset("drift_alpha").dims(), (h5::Dims{0}));
        EXPECT_EQ(H5DSget_num_scales(fc.open_dataset("drift_alpha").id(), 0), 1);
    }
}

// A file made from the skeleton lists its links in the order docs/hdf5_layout.md gives, the
// order in which a writer that created every object during the run would have made them: the
// run's datasets (predictions, metrics) after the layer groups and scales, a run's own series last.
TEST_F(ResultsTest, AFileListsItsLinksInTheLayoutOrder) {
    const Network net = small_network();
    for (int repeat = 0; repeat < 2; ++repeat) {  // the skeleton's first file, then a copy's
        SCOPED_TRACE(repeat);
        {
            ResultsWriter w(path("r.h5"), net, spec(2));
            write_all(w, net, 2);
            w.set_layer_series(0, "gain", std::vector<double>{1.0, 2.0});
            w.commit();
        }
        const auto f = h5::File::open_read(path("r.h5"));
        EXPECT_EQ(f.children_in_creation_order(),
                  (std::vector<std::string>{"round", "chip", "t", "niu_round", "drift_compensation", "image", "class",
                                            "labels", "logits", "layers", "predictions", "accuracy",
                                            "reference_predictions", "reference_logits", "reference_accuracy"}));
        EXPECT_EQ(f.open_group("layers").open_group("conv").children_in_creation_order(),
                  (std::vector<std::string>{"round", "chip", "t", "niu_round", "drift_compensation", "image", "y", "x",
                                            "channel", "reference", "activations", "snr_db", "cosine", "mismatch_rate",
                                            "gain"}));
    }
}

// A file made from an image asks for the image only once its temporary file exists: a target in
// a missing folder, or under a file, is refused at once, without building a skeleton (which a
// large network's writer would also have cached for nothing).
TEST_F(ResultsTest, ARefusedTargetNeverAsksForTheImage) {
    int built = 0;
    const auto image = [&] {
        ++built;
        h5::File f = h5::File::create_in_memory("atomic-file-image-test");
        const std::int64_t one = 1;
        f.write_dataset("one", {1}, &one);
        auto bytes = std::make_shared<const std::vector<unsigned char>>(f.image());
        f.close();
        return bytes;
    };
    { std::ofstream(path("plain")) << "x"; }
    for (const std::string& target : {path("missing/r.h5"), path("plain") + "/r.h5"}) {
        SCOPED_TRACE(target);
        EXPECT_THROW(h5::AtomicFile(target, true, image), h5::Error);
        EXPECT_EQ(built, 0);
    }
    EXPECT_EQ(file_count(), 1u);  // "plain" only: no temporary file left
    {
        h5::AtomicFile out(path("r.h5"), true, image);
        EXPECT_EQ(built, 1);
        out.file().write_dataset("two", {1}, std::vector<std::int64_t>{2}.data());
        out.commit();
    }
    const auto f = h5::File::open_read(path("r.h5"));
    EXPECT_EQ(f.children_in_creation_order(), (std::vector<std::string>{"one", "two"}));
    EXPECT_EQ(f.open_dataset("one").read<std::int64_t>(), (std::vector<std::int64_t>{1}));
}
