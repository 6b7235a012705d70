// Hostile input to the file layer: paths that are not files, outputs that must not be replaced,
// temporary files of killed writers, and every bad file of the fuzz seed corpora refused with
// the field named (tests/fuzz/corpus, written by tests/fuzz/make_seeds.py).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <set>
#include <thread>
#include <variant>

#include "common/errors.hpp"
#include "common/h5.hpp"
#include "common/temp_files.hpp"
#include "formats/between_reads_hook.hpp"
#include "formats/field_reader.hpp"
#include "formats/model_file.hpp"
#include "formats/model_handover.hpp"
#include "formats/results_reader.hpp"
#include "formats/untrusted_file.hpp"
#include "formats/zoo.hpp"
#include "expect_same_network.hpp"
#include "expect_same_network.hpp"

namespace fs = std::filesystem;
using namespace aimcemu;

namespace {

class HostileFiles : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() / ("aimcemu_hostile_" + std::to_string(::getpid()) + "_" + info->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    std::set<std::string> names() const {
        std::set<std::string> out;
        for (const auto& e : fs::directory_iterator(dir_)) out.insert(e.path().filename().string());
        return out;
    }
    static void touch(const std::string& p, const std::string& content = "x") { std::ofstream(p) << content; }
    fs::path dir_;
};

// A shell line that writes `report` as the checking process frames it (helper_report_record), for
// fake checking processes; `report` holds no quote, backslash or percent sign.
std::string print_report(const std::string& report) {
    std::string escaped;
    for (const char c : helper_report_record(report)) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    return "printf '" + escaped + "'\n";
}

// What a checking process hands over for `net` (every GEMM layer's weights, then the structure
// record), written to `file` for a fake helper to copy to its descriptor 3 (`cat file >&3`), with
// `extra` bytes (or, negative, fewer) of weights; returns the report that goes with it.
std::string write_hand_over(const aimcemu::Network& net, const std::string& file, std::int64_t extra = 0) {
    std::string weights, counts_note;
    std::vector<std::uint64_t> counts;
    for (const auto& l : net.layers) {
        if (!l.is_gemm()) continue;
        weights.append(reinterpret_cast<const char*>(l.weights.data()), l.weights.size());
        counts.push_back(l.weights.size());
    }
    if (extra >= 0) weights.append(std::size_t(extra), '\0');
    else weights.resize(weights.size() - std::size_t(-extra));
    const std::string structure = aimcemu::encode_model_structure(net, counts);
    std::ofstream(file, std::ios::binary) << weights << structure;
    return "ok\nweights " + std::to_string(weights.size()) + " structure " + std::to_string(structure.size());
}

// A PID that is certainly not running: a child that has exited and been collected.
pid_t dead_pid() {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    ::waitpid(child, nullptr, 0);
    return child;
}

template <class F>
std::string format_error_of(F&& f) {
    try {
        f();
    } catch (const FormatError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

// ---- temporary file names ----

TEST(TemporaryNames, ParseTheNewAndTheOldForm) {
    const auto p = files::parse_temporary_name(".run.h5.tmp-node_7.cluster-4242-3");
    ASSERT_TRUE(p.ok);
    EXPECT_EQ(p.target, "run.h5");
    EXPECT_EQ(p.host, "node_7.cluster");
    EXPECT_EQ(p.pid, 4242);
    const auto old = files::parse_temporary_name(".a.tmp-b.h5.tmp-17-0");  // the name itself holds ".tmp-"
    ASSERT_TRUE(old.ok);
    EXPECT_EQ(old.target, "a.tmp-b.h5");
    EXPECT_EQ(old.host, "");
    EXPECT_EQ(old.pid, 17);
    for (const char* not_one : {"run.h5", ".run.h5", ".run.h5.tmp-", ".run.h5.tmp-12", ".run.h5.tmp-x-y-1",
                                ".run.h5.tmp-host-12-", "run.h5.tmp-12-0", ".run.h5.tmp-ho$t-12-0"})
        EXPECT_FALSE(files::parse_temporary_name(not_one).ok) << not_one;
}

TEST(TemporaryNames, FreshNamesAreHiddenBesideTheTargetAndCarryHostAndPid) {
    const std::string a = files::temporary_path_for("out/run.h5"), b = files::temporary_path_for("out/run.h5");
    EXPECT_NE(a, b);
    EXPECT_EQ(fs::path(a).parent_path(), fs::path("out"));
    const auto p = files::parse_temporary_name(fs::path(a).filename().string());
    ASSERT_TRUE(p.ok);
    EXPECT_EQ(p.target, "run.h5");
    EXPECT_EQ(p.host, files::host_tag());
    EXPECT_EQ(p.pid, ::getpid());
}

// Review rev_C: the tag was the host name cut to 32 characters, so two pods whose names share
// their first 32 (a cluster's "aimcemu-dask-worker-7d9f8b6c5-abcde" and "-abxyz") each took the
// other's live temporary files for their own stale ones and removed them.  Containers sharing a
// host name but not their PID namespace did the same.
TEST(TemporaryNames, HostsSharingANamePrefixOrAHostNameHaveTheirOwnTags) {
    const std::string a = files::host_tag_of("aimcemu-dask-worker-7d9f8b6c5-abcde", "pid:[4026531836]");
    const std::string b = files::host_tag_of("aimcemu-dask-worker-7d9f8b6c5-abxyz", "pid:[4026531836]");
    const std::string c = files::host_tag_of("aimcemu-dask-worker-7d9f8b6c5-abcde", "pid:[4026532201]");
    EXPECT_NE(a, b);
    EXPECT_NE(a, c);
    EXPECT_EQ(a, files::host_tag_of("aimcemu-dask-worker-7d9f8b6c5-abcde", "pid:[4026531836]"));
    EXPECT_EQ(a.rfind("aimcemu_dask_worker_7d9.", 0), 0u) << a;
    for (const auto& tag : {a, b, c, files::host_tag_of("", ""), files::host_tag(), files::host_tag_of(std::string(300, '\xff'), "")}) {
        EXPECT_LE(tag.size(), 32u) << tag;
        const auto parsed = files::parse_temporary_name(".r.h5.tmp-" + tag + "-12-0");
        EXPECT_TRUE(parsed.ok) << tag;
        EXPECT_EQ(parsed.host, tag);
    }
    // A file of the other pod, whose writer's PID is not running here, is left alone.
    const fs::path folder = fs::temp_directory_path() / ("aimcemu_tags_" + std::to_string(::getpid()));
    fs::create_directories(folder);
    const std::string others = ".t.h5.tmp-" + b + "-" + std::to_string(dead_pid()) + "-0";
    std::ofstream(folder / others) << "x";
    EXPECT_TRUE(files::remove_stale_temporaries(folder.string()).empty());
    EXPECT_TRUE(fs::exists(folder / others));
    fs::remove_all(folder);
}

TEST(TemporaryNames, WriterIsGoneOnlyWhenItsPidIsDeadZombieOrReused) {
    const double now = double(std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch()).count());
    EXPECT_FALSE(files::writer_is_gone(::getpid(), now));        // alive, and started before the file
    EXPECT_TRUE(files::writer_is_gone(dead_pid(), now));          // exited
    EXPECT_TRUE(files::writer_is_gone(::getpid(), 1000.0));      // alive but started long after the file: reused
    const pid_t zombie = ::fork();
    if (zombie == 0) ::_exit(0);
    ::usleep(200 * 1000);  // exited, not yet collected
    EXPECT_TRUE(files::writer_is_gone(zombie, now));
    ::waitpid(zombie, nullptr, 0);
    EXPECT_FALSE(files::writer_is_gone(0, now));   // never a real writer: left alone
    EXPECT_FALSE(files::writer_is_gone(-5, now));
}

TEST_F(HostileFiles, OnlyStaleTemporariesOfThisHostAreRemoved) {
    const std::string host = files::host_tag();
    const std::string dead = std::to_string(dead_pid()), alive = std::to_string(::getpid());
    const std::string stale_new = ".a.h5.tmp-" + host + "-" + dead + "-0", stale_old = ".b.h5.tmp-" + dead + "-4";
    const std::string live = ".c.h5.tmp-" + host + "-" + alive + "-1", other_host = ".d.h5.tmp-elsewhere9-" + dead + "-0";
    const std::string reused = ".e.h5.tmp-" + host + "-" + alive + "-2";
    for (const auto& n : {stale_new, stale_old, live, other_host, reused, std::string("a.h5"), std::string(".hidden")})
        touch(path(n));
    ::utimbuf long_ago{1000, 1000};  // written long before this process started: its PID was reused
    ASSERT_EQ(::utime(path(reused).c_str(), &long_ago), 0);
    fs::create_directory(path(".f.h5.tmp-" + host + "-" + dead + "-0"));  // a folder is never a temporary file
    const auto removed = files::remove_stale_temporaries(dir_.string());
    EXPECT_EQ(std::set<std::string>(removed.begin(), removed.end()),
              (std::set<std::string>{path(stale_new), path(stale_old), path(reused)}));
    EXPECT_EQ(names(), (std::set<std::string>{live, other_host, "a.h5", ".hidden", ".f.h5.tmp-" + host + "-" + dead + "-0"}));
    EXPECT_TRUE(files::remove_stale_temporaries(path("no_such_folder")).empty());
}

TEST_F(HostileFiles, AnAtomicWriteRemovesTheStaleTemporariesOfItsFolder) {
    const std::string stale = ".old.h5.tmp-" + files::host_tag() + "-" + std::to_string(dead_pid()) + "-0";
    touch(path(stale));
    h5::AtomicFile out(path("new.h5"));
    out.file().write_attribute("x", "y");
    out.commit();
    EXPECT_EQ(names(), std::set<std::string>{"new.h5"});
}

// ---- outputs that must never be replaced ----

TEST_F(HostileFiles, AtomicFileRefusesFoldersDevicesAndFifos) {
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    fs::create_directory(path("folder"));
    for (const std::string target : {path("fifo"), path("folder"), path("folder") + "/", path("new") + "/",
                                     std::string("/dev/null")}) {
        EXPECT_THROW(h5::AtomicFile{target}, h5::Error) << target;
    }
    EXPECT_TRUE(fs::is_fifo(path("fifo")));
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
    EXPECT_EQ(names(), (std::set<std::string>{"fifo", "folder"}));  // nothing written, nothing left
}

TEST_F(HostileFiles, NoReplaceCommitLeavesAnExistingFileAlone) {
    touch(path("task.h5"), "first");
    {
        h5::AtomicFile out(path("task.h5"), /*replace=*/false);
        out.file().write_attribute("x", "y");
        EXPECT_THROW(out.commit(), h5::Error);
    }
    std::ifstream in(path("task.h5"));
    std::string content;
    in >> content;
    EXPECT_EQ(content, "first");
    EXPECT_EQ(names(), std::set<std::string>{"task.h5"});
    h5::AtomicFile fresh(path("fresh.h5"), /*replace=*/false);
    fresh.file().write_attribute("x", "y");
    fresh.commit();
    EXPECT_EQ(names(), (std::set<std::string>{"task.h5", "fresh.h5"}));
}

TEST_F(HostileFiles, RenameNoReplace) {
    touch(path("a"), "a");
    touch(path("b"), "b");
    std::error_code ec;
    files::rename_no_replace(path("a"), path("b"), ec);
    EXPECT_EQ(ec, std::errc::file_exists);
    files::rename_no_replace(path("a"), path("c"), ec);
    EXPECT_FALSE(ec);
    EXPECT_EQ(names(), (std::set<std::string>{"b", "c"}));
}

// ---- inputs that are not files ----

TEST_F(HostileFiles, AFifoAsInputIsRefusedWithoutBlocking) {
    ASSERT_EQ(::mkfifo(path("model.h5").c_str(), 0600), 0);
    // A blocking open of a FIFO with no writer never returns: run it apart and give it a deadline.
    auto result = std::async(std::launch::async, [&] {
        return format_error_of([&] { load_model(path("model.h5")); }) + " | " +
               format_error_of([&] { load_dataset(path("model.h5")); }) + " | " +
               format_error_of([&] { read_results(path("model.h5")); });
    });
    ASSERT_EQ(result.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "a loader opened the FIFO";
    const std::string text = result.get();
    EXPECT_EQ(text.find("(no error)"), std::string::npos) << text;
    EXPECT_NE(text.find("field 'file': is not a regular file"), std::string::npos) << text;
    EXPECT_NE(format_error_of([&] { load_model(dir_.string()); }).find("is a folder"), std::string::npos);
    EXPECT_NE(format_error_of([&] { load_model("/dev/zero"); }).find("not a regular file"), std::string::npos);
}

// A FIFO renamed over the input's path while it is opened is never opened for reading (opening a
// device or FIFO can act on it): the opener names the file without opening it (O_PATH), checks that
// it is a regular file, and only then opens that same file.  inotify reports every open of the FIFO
// for reading or writing (not an O_PATH one); the path flips between a regular file and the FIFO
// meanwhile.  A stat-then-open opener, whose path can change in between, opened the FIFO here
// within the first few hundred opens.
TEST_F(HostileFiles, AFifoRenamedOverTheInputIsNeverOpened) {
    touch(path("file"), "a regular file");
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ASSERT_GE(watch, 0);
    ASSERT_GE(::inotify_add_watch(watch, path("fifo").c_str(), IN_OPEN), 0);
    const std::string input = path("input"), staged = path("staged");
    ASSERT_EQ(::link(path("file").c_str(), input.c_str()), 0);
    std::atomic<bool> stop{false};
    std::thread flipper([&] {
        // Each rename puts the other one over the path, atomically (no moment without a file).
        for (bool fifo_next = true; !stop.load(std::memory_order_relaxed); fifo_next = !fifo_next) {
            ::unlink(staged.c_str());
            if (::link(path(fifo_next ? "fifo" : "file").c_str(), staged.c_str()) == 0) ::rename(staged.c_str(), input.c_str());
        }
    });
    int regular = 0, refused = 0;
    for (int i = 0; i < 20000; ++i) {
        try {
            const int fd = open_user_file_descriptor(input);
            struct stat st {};
            EXPECT_EQ(::fstat(fd, &st), 0);
            EXPECT_TRUE(S_ISREG(st.st_mode));
            ::close(fd);
            ++regular;
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
            ++refused;
        }
    }
    stop = true;
    flipper.join();
    alignas(inotify_event) char events[4096];
    const ssize_t got = ::read(watch, events, sizeof events);
    ::close(watch);
    EXPECT_LT(got, 0) << "the FIFO was opened while it stood at the input's path";
    EXPECT_GT(regular, 0);
    EXPECT_GT(refused, 0) << "the path never held the FIFO when it was opened: the test proves nothing";
}

// Without /proc (a container or chroot that does not mount it) the opener falls back to stat, then
// open: a regular file opens, a FIFO and a folder are refused without blocking.  Run in a child with
// its own mount namespace and an empty tmpfs over /proc (needs root with CAP_SYS_ADMIN, else skipped).
TEST_F(HostileFiles, WithoutProcTheOpenerStillOpensRegularFilesOnly) {
    touch(path("file"), "a regular file");
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::alarm(20);  // a FIFO opened for reading would block forever
        if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("none", "/proc", "tmpfs", 0, nullptr) != 0)
            ::_exit(77);
        if (::access("/proc/self/fd", F_OK) == 0) ::_exit(78);
        int failures = 0;
        try {
            const int fd = open_user_file_descriptor(path("file"));
            char byte = 0;
            failures += ::read(fd, &byte, 1) == 1 && byte == 'a' ? 0 : 1;
            ::close(fd);
        } catch (const FormatError&) {
            ++failures;
        }
        for (const std::string refused : {path("fifo"), dir_.string()}) {
            try {
                ::close(open_user_file_descriptor(refused));
                ++failures;
            } catch (const FormatError& e) {
                failures += std::string(e.what()).find(refused + ": field 'file': is ") == 0 ? 0 : 1;
            }
        }
        ::_exit(failures);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the child was killed: the FIFO was opened for reading";
    if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot make a mount namespace here (needs CAP_SYS_ADMIN)";
    ASSERT_NE(WEXITSTATUS(status), 78) << "/proc is still there";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "failures in the child";
}

TEST(Utf8, ValidAndInvalidSequences) {
    std::size_t at = 0;
    EXPECT_TRUE(valid_utf8("", at));
    EXPECT_TRUE(valid_utf8("conv1 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", at));  // é € 😀
    const std::pair<std::string, std::size_t> bad[] = {
        {"ab\xff", 2}, {"\xc0\xaf", 0} /* overlong '/' */, {"x\xed\xa0\x80", 1} /* surrogate */,
        {"\xf4\x90\x80\x80", 0} /* above U+10FFFF */, {"abc\xe2\x82", 3} /* cut short */, {"\x80", 0}};
    for (const auto& [text, position] : bad) {
        EXPECT_FALSE(valid_utf8(text, at)) << text;
        EXPECT_EQ(at, position) << text;
    }
}

// ---- the seed corpora: every bad file refused with its field named ----

struct BadFile {
    const char* harness;
    const char* file;
    const char* expected;  // part of the FormatError message
};

const BadFile kBadFiles[] = {
    {"fuzz_model_file", "bad-class_names_count.h5", "field 'class_names': 2 names for the 3 outputs"},
    {"fuzz_model_file", "bad-empty.h5", "field 'file': not a readable HDF5 file"},
    {"fuzz_model_file", "bad-external_link.h5", "field 'layers/fc': is an external link"},
    {"fuzz_model_file", "bad-external_storage.h5", "field 'layers/conv/weights': its data lives in external files"},
    {"fuzz_model_file", "bad-format_foreign.h5", "field 'format': expected 'aimcemu-model'"},
    {"fuzz_model_file", "bad-format_version_99.h5", "field 'format_version'"},
    {"fuzz_model_file", "bad-input_shape_huge.h5", "field 'input_shape': every dimension must be in 1..65535 (got 1048576)"},
    {"fuzz_model_file", "bad-kernel_h_int64_huge.h5", "field 'layers/conv/kernel_h': value 1099511627776 outside"},
    {"fuzz_model_file", "bad-kernel_w_uint64_top.h5", "field 'layers/conv/kernel_w': value"},
    {"fuzz_model_file", "bad-kind_unknown.h5", "field 'layers/conv/kind': unknown layer kind 'lstm'"},
    {"fuzz_model_file", "bad-layer_name_not_utf8.h5", "field 'layers/f\\xffc': the name is not valid UTF-8"},
    {"fuzz_model_file", "bad-name_not_utf8.h5", "field 'name': not valid UTF-8 (byte 0xff at position 2)"},
    {"fuzz_model_file", "bad-not_hdf5.h5", "field 'file': not a readable HDF5 file"},
    {"fuzz_model_file", "bad-out_channels_max.h5", "field 'layers/fc/weights': expected shape [out_channels=2147483647"},
    {"fuzz_model_file", "bad-pad_bottom_negative.h5", "(pool)/pad_bottom': must be in 0..kernel_h-1"},
    {"fuzz_model_file", "bad-pad_left_big.h5", "(conv)/pad_left': must be in 0..kernel_w-1"},
    {"fuzz_model_file", "bad-square_fields_in_v2.h5", "field 'layers/conv/kernel_h': missing"},
    {"fuzz_model_file", "bad-soft_link.h5", "field 'layers/loop': is a soft or user-defined link"},
    {"fuzz_model_file", "bad-stride_w_array.h5", "field 'layers/pool/stride_w': expected a scalar"},
    {"fuzz_model_file", "bad-v1_kernel_int64_huge.h5", "field 'layers/conv/kernel': value 1099511627776 outside"},
    {"fuzz_model_file", "bad-v1_pad_missing.h5", "field 'layers/conv/pad': missing"},
    {"fuzz_model_file", "bad-truncated_half.h5", "field 'file': not a readable HDF5 file"},
    {"fuzz_model_file", "bad-truncated_header.h5", "field 'file': not a readable HDF5 file"},
    {"fuzz_model_file", "bad-weights_chunks_missing.h5", "field 'layers/fc/weights': shape [3, 16777216] needs"},
    {"fuzz_model_file", "bad-weights_claim_huge.h5", "field 'layers/conv/weights': shape [4, 3, 3, 268435456] needs"},
    {"fuzz_model_file", "bad-weights_float.h5", "field 'layers/conv/weights': expected int8, found float32"},
    {"fuzz_dataset_file", "bad-format_version_2.h5", "field 'format_version'"},
    {"fuzz_dataset_file", "bad-frac_bits_big.h5", "field 'input_frac_bits': value 99 outside"},
    {"fuzz_dataset_file", "bad-images_claim_1e9.h5", "field 'labels': shape [1000000000] needs 8000000000 bytes"},
    {"fuzz_dataset_file", "bad-images_contiguous_unwritten.h5", "field 'images': shape [20000, 6, 6, 2] needs"},
    {"fuzz_dataset_file", "bad-images_dims_huge.h5", "field 'images': image dimensions must be in 1..65535"},
    {"fuzz_dataset_file", "bad-labels_float.h5", "field 'labels': expected an integer type, found float64"},
    {"fuzz_dataset_file", "bad-labels_negative.h5", "field 'labels': negative label -1"},
    {"fuzz_dataset_file", "bad-labels_short.h5", "field 'labels': expected shape [5] (one per image), found [4]"},
    {"fuzz_dataset_file", "bad-not_hdf5.h5", "field 'file': not a readable HDF5 file"},
    {"fuzz_dataset_file", "bad-source_not_utf8.h5", "field 'source': not valid UTF-8"},
    {"fuzz_dataset_file", "bad-truncated_half.h5", "field 'file': not a readable HDF5 file"},
    {"fuzz_dataset_file", "bad-zero_images.h5", "field 'images': the data set holds no images"},
    {"fuzz_results_file", "bad-accuracy_above_one.h5", "field 'accuracy': values must be in 0..1"},
    {"fuzz_results_file", "bad-accuracy_short.h5", "field 'accuracy': expected shape [8], found [3]"},
    {"fuzz_results_file", "bad-activations_shape.h5", "field 'layers/conv/activations': expected shape [8, 4, 6, 6, 4]"},
    {"fuzz_results_file", "bad-config_not_utf8.h5", "field 'config': not valid UTF-8"},
    {"fuzz_results_file", "bad-format_foreign.h5", "field 'format': expected 'aimcemu-results', found 'aimcemu-model'"},
    {"fuzz_results_file", "bad-format_version_99.h5", "this build reads version 2, the file is version 99"},
    {"fuzz_results_file", "bad-labels_claim_huge.h5", "field 'labels': expected shape [4], found [1073741824]"},
    {"fuzz_results_file", "bad-layer_names_differ.h5", "field 'layers': its groups differ from the root's layer_names"},
    {"fuzz_results_file", "bad-missing_layer.h5", "field 'layers': its groups differ"},
    {"fuzz_results_file", "bad-not_hdf5.h5", "field 'file': not a readable HDF5 file"},
    {"fuzz_results_file", "bad-round_not_positions.h5", "field 'round': must be the positions 0..R-1"},
    {"fuzz_results_file", "bad-t_negative.h5", "field 't': times must be finite and >= 0"},
    {"fuzz_results_file", "bad-truncated_half.h5", "field 'file': not a readable HDF5 file"},
};

// The public loaders read through the checking process (formats/untrusted_file.hpp) here, as
// they do under Python; the messages are the same either way.
class SeedCorpora : public ::testing::TestWithParam<bool> {
protected:
    void SetUp() override { set_file_check_helper(GetParam() ? AIMCEMU_CHECK_FILE_HELPER : ""); }
    void TearDown() override { set_file_check_helper(""); }
};
INSTANTIATE_TEST_SUITE_P(InProcessAndChecked, SeedCorpora, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "checked" : "in_process"; });

TEST_P(SeedCorpora, EveryBadFileIsRefusedNamingItsField) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    std::set<std::string> listed;
    for (const BadFile& bad : kBadFiles) {
        const std::string p = (corpus / bad.harness / bad.file).string();
        listed.insert(std::string(bad.harness) + "/" + bad.file);
        const std::string harness = bad.harness;
        const std::string message = format_error_of([&] {
            if (harness == "fuzz_model_file") load_model(p);
            else if (harness == "fuzz_dataset_file") load_dataset(p);
            else read_results(p);
        });
        EXPECT_EQ(message.rfind(p + ": ", 0), 0u) << "the message does not start with the file: " << message;
        EXPECT_NE(message.find(bad.expected), std::string::npos) << p << "\n  got: " << message;
    }
    // Every bad-* seed of the HDF5 corpora is listed above, so a new one gets its expectation.
    for (const char* harness : {"fuzz_model_file", "fuzz_dataset_file", "fuzz_results_file"})
        for (const auto& e : fs::directory_iterator(corpus / harness))
            if (e.path().filename().string().rfind("bad-", 0) == 0)
                EXPECT_TRUE(listed.count(std::string(harness) + "/" + e.path().filename().string())) << e.path();
}

TEST_P(SeedCorpora, TheGoodFilesLoad) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const Network net = load_model((corpus / "fuzz_model_file" / "tiny.h5").string());
    EXPECT_EQ(net.layers.size(), 5u);
    const DataSet data = load_dataset((corpus / "fuzz_dataset_file" / "tiny.h5").string());
    EXPECT_EQ(data.count(), 5);
    check_dataset_fits(data, net, "tiny.h5");
    const ResultsFileInfo noisy = read_results((corpus / "fuzz_results_file" / "noisy.h5").string());
    EXPECT_EQ(noisy.rounds.size(), 8u);  // 2 compensations x 2 chips x 2 t x 1 round
    EXPECT_EQ(noisy.layers.size(), 5u);
    EXPECT_EQ(noisy.classes, 3);
    EXPECT_TRUE(noisy.layers[0].activations_stored && !noisy.layers[1].activations_stored);
    EXPECT_EQ(read_results((corpus / "fuzz_results_file" / "digital.h5").string()).rounds.size(), 0u);
}

// Inputs on which the HDF5 library itself misbehaves (found by fuzzing: tests/fuzz/run_fuzzer.py
// sorts them out).  Read through the checking process they give a FormatError or load; this
// process survives either way, whatever libhdf5 does with them.
TEST(HdfCrashes, CheckedLoadersSurviveInputsThatBreakLibhdf5) {
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const fs::path root = fs::path(AIMCEMU_FUZZ_CORPUS).parent_path() / "hdf5_crashes";
    std::size_t count = 0;
    for (const char* harness : {"fuzz_model_file", "fuzz_dataset_file", "fuzz_results_file"}) {
        if (!fs::is_directory(root / harness)) continue;
        for (const auto& e : fs::directory_iterator(root / harness)) {
            const std::string p = e.path().string(), h = harness;
            try {
                if (h == "fuzz_model_file") load_model(p);
                else if (h == "fuzz_dataset_file") load_dataset(p);
                else read_results(p);
            } catch (const FormatError& error) {
                EXPECT_EQ(std::string(error.what()).rfind(p + ": ", 0), 0u) << error.what();
            }
            ++count;
        }
    }
    set_file_check_helper("");
    EXPECT_GT(count, 0u);
}

// The checking process itself: a helper that dies is reported as a crash, not as success.
TEST_F(HostileFiles, AHelperThatDiesIsAFormatError) {
    const std::string fake = path("crashing-helper.sh");
    touch(fake, "#!/bin/sh\nkill -SEGV $$\n");
    fs::permissions(fake, fs::perms::owner_all);
    set_file_check_helper(fake);
    touch(path("model.h5"));
    const std::string message = format_error_of([&] { load_model(path("model.h5")); });
    set_file_check_helper("");
    EXPECT_NE(message.find("field 'file': corrupt: reading it crashed the HDF5 library"), std::string::npos) << message;
    EXPECT_NE(message.find("signal 11"), std::string::npos) << message;
}

// The checked load takes the weights the checking process read and handed over: the network is
// the in-process read's, bit for bit (every field of the network and of each layer).
TEST_F(HostileFiles, TheCheckedLoadHandsOverTheSameWeights) {
    const std::string file = path("resnet18.h5");
    Network saved = zoo::resnet18(3, 64, 10);
    for (int c = 0; c < 10; ++c) saved.class_names.push_back("class " + std::to_string(c));
    save_model(saved, file);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const Network checked = load_model(file);
    set_file_check_helper("");
    const Network direct = load_model(file);
    expect_same_network(checked, direct);
    EXPECT_EQ(checked.class_names.size(), 10u);
    EXPECT_GT(checked.total_weights(), 0);
}

// The checking process's side of the hand-over, run as the loader runs it (descriptor 3 open for
// reading and writing, as the memory file is, for the mapping it writes through): it receives
// every GEMM layer's weights, in the order of the file's layers, byte for byte what the in-process
// read gives, then the structure record of the network the in-process read gives, and nothing
// else; stdout one "ok" record per file.
TEST_F(HostileFiles, TheCheckingProcessWritesEveryGemmLayersWeightsInOrder) {
    const std::string file = path("resnet18.h5");
    save_model(zoo::resnet18(5, 32, 10), file);
    const Network direct = load_model_in_process(file);
    std::string expected;
    std::vector<std::uint64_t> counts;
    for (const auto& l : direct.layers) {
        expected.append(reinterpret_cast<const char*>(l.weights.data()), l.weights.size());
        if (l.is_gemm()) counts.push_back(l.weights.size());
    }
    const std::string record = encode_model_structure(direct, counts);
    const std::string data = (fs::path(AIMCEMU_FUZZ_CORPUS) / "fuzz_dataset_file" / "tiny.h5").string();
    const std::string command = std::string("'") + AIMCEMU_CHECK_FILE_HELPER + "' model-weights '" + file + "' '" + data +
                                "' 3<>'" + path("handed.bin") + "' >'" + path("report.txt") + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const auto read_all = [](const std::string& p) {
        std::ifstream in(p, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string handed = read_all(path("handed.bin"));
    ASSERT_EQ(handed.size(), std::size_t(direct.total_weights()) + record.size());
    EXPECT_TRUE(handed.substr(0, expected.size()) == expected) << "the handed-over weights differ from the in-process read";
    EXPECT_TRUE(handed.substr(expected.size()) == record) << "the structure record differs from the in-process read's";
    EXPECT_EQ(read_all(path("report.txt")),
              helper_report_record("ok\nweights " + std::to_string(direct.total_weights()) + " structure " +
                                   std::to_string(record.size())) +
                  helper_report_record("ok"));
}

// With --fds the checking process reads the files open on descriptors 4, 5, ... (the caller's), and
// the paths only name them: here paths that name nothing, and the report names them.
TEST_F(HostileFiles, WithFdsTheCheckingProcessReadsTheDescriptorsAndNamesThePaths) {
    const std::string file = path("resnet18.h5");
    save_model(zoo::resnet18(5, 32, 10), file);
    const Network direct = load_model_in_process(file);
    const std::string bad_data = (fs::path(AIMCEMU_FUZZ_CORPUS) / "fuzz_dataset_file" / "bad-labels_negative.h5").string();
    const std::string command = std::string("'") + AIMCEMU_CHECK_FILE_HELPER +
                                "' --fds model-weights /named/model.h5 /named/data.h5 4<'" + file + "' 5<'" + bad_data +
                                "' 3<>'" + path("handed.bin") + "' >'" + path("report.txt") + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(path("report.txt"), std::ios::binary);
    const std::string report((std::istreambuf_iterator<char>(in)), {});
    const std::string first = helper_report_record(write_hand_over(direct, path("expected.bin")));
    EXPECT_EQ(report.substr(0, first.size()), first);
    EXPECT_NE(report.find(std::string(":format-error\n/named/data.h5\0labels\0", 36), first.size()), std::string::npos)
        << report.substr(first.size());
    EXPECT_EQ(fs::file_size(path("handed.bin")), fs::file_size(path("expected.bin")));
}

// The memory file of one hand-over is reused by the next (its pages stay allocated): a larger
// model after a smaller one, a smaller after a larger, and the same again each load their own weights.
TEST_F(HostileFiles, SuccessiveCheckedLoadsEachGetTheirOwnWeights) {
    const std::string small = path("small.h5"), large = path("large.h5");
    save_model(zoo::resnet18(1, 32, 10), small);
    save_model(zoo::resnet18(2, 32, 1000), large);
    const Network small_direct = load_model_in_process(small), large_direct = load_model_in_process(large);
    ASSERT_LT(small_direct.total_weights(), large_direct.total_weights());
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    for (const auto* file : {&small, &large, &small, &small, &large}) {
        const Network checked = load_model(*file);
        const Network& direct = *file == small ? small_direct : large_direct;
        ASSERT_EQ(checked.layers.size(), direct.layers.size());
        for (std::size_t i = 0; i < direct.layers.size(); ++i)
            EXPECT_EQ(checked.layers[i].weights, direct.layers[i].weights) << *file << " " << direct.layers[i].name;
    }
    set_file_check_helper("");
}

// A helper that reports the model read without saying how much of it it handed over is refused:
// a reused memory file may hold an earlier model, which must never be taken for this one.
TEST_F(HostileFiles, AHandOverWithoutItsSizeIsRefused) {
    const std::string file = (fs::path(AIMCEMU_FUZZ_CORPUS) / "fuzz_model_file" / "tiny.h5").string();
    const std::string fake = path("says-only-ok.sh");
    touch(fake, "#!/bin/sh\n" + print_report("ok"));
    fs::permissions(fake, fs::perms::owner_all);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    load_model(file);  // leaves a memory file with tiny.h5's weights for the next hand-over
    set_file_check_helper(fake);
    const std::string message = format_error_of([&] { load_model(file); });
    set_file_check_helper("");
    EXPECT_EQ(message.rfind(file + ": field 'file': the file check did not say how much of the model it handed over", 0), 0u)
        << message;
    // Nor a report whose counts are not exactly "weights N structure M".
    const Network net = load_model_in_process(file);
    const std::string whole = write_hand_over(net, path("whole.bin"));
    const std::string n = whole.substr(whole.find("weights ") + 8, whole.find(" structure") - whole.find("weights ") - 8);
    for (const std::string& bad : std::vector<std::string>{"ok\nweights " + n, "ok\nweights " + n + " structure", "ok\nweights " + n + " structure 5 x",
                                   "ok\nweights " + n + "  structure 5", "ok\nweights -1 structure 5", "ok\nweights 0x10 structure 5",
                                   "ok\nstructure 5 weights " + n}) {
        const std::string fake_bad = path("says-" + std::to_string(std::hash<std::string>{}(bad)) + ".sh");
        touch(fake_bad, "#!/bin/sh\ncat '" + path("whole.bin") + "' >&3\n" + print_report(bad));
        fs::permissions(fake_bad, fs::perms::owner_all);
        set_file_check_helper(fake_bad);
        const std::string refused = format_error_of([&] { load_model(file); });
        set_file_check_helper("");
        EXPECT_NE(refused.find("did not say how much of the model it handed over"), std::string::npos) << bad << ": " << refused;
    }
}

// A network without GEMM layers hands over an empty memory file, and loads the same checked.
TEST_F(HostileFiles, AModelWithoutGemmLayersLoadsThroughTheCheckingProcess) {
    Network net;
    net.name = "pool-only";
    net.input_shape = {4, 4, 2};
    Layer pool;
    pool.name = "pool";
    pool.kind = LayerKind::MaxPool;
    pool.window = Window::square(2, 2);
    pool.out_channels = 2;
    net.layers.push_back(pool);
    const std::string file = path("pool.h5");
    save_model(net, file);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const Network checked = load_model(file);
    set_file_check_helper("");
    ASSERT_EQ(checked.layers.size(), 1u);
    EXPECT_EQ(checked.layers[0].out_shape, (Shape3{2, 2, 2}));
    EXPECT_EQ(checked.total_weights(), 0);
}

// A loaded network is the file as it was when loaded: rewriting the file in place afterwards (the
// same inode, other weights) changes none of its weights.
TEST_F(HostileFiles, ALoadedNetworkKeepsItsWeightsWhenTheFileIsRewritten) {
    const std::string file = path("model.h5"), other = path("other.h5");
    save_model(zoo::resnet18(1, 32, 10), file);
    save_model(zoo::resnet18(2, 32, 10), other);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const Network loaded = load_model(file);
    set_file_check_helper("");
    const Network before = load_model_in_process(file);
    struct stat st_before {}, st_after {};
    ASSERT_EQ(::stat(file.c_str(), &st_before), 0);
    fs::copy_file(other, file, fs::copy_options::overwrite_existing);
    ASSERT_EQ(::stat(file.c_str(), &st_after), 0);
    ASSERT_EQ(st_before.st_ino, st_after.st_ino) << "the file was replaced, not rewritten in place";
    ASSERT_NE(load_model_in_process(file).layers[0].weights, before.layers[0].weights);
    for (std::size_t i = 0; i < before.layers.size(); ++i)
        EXPECT_EQ(loaded.layers[i].weights, before.layers[i].weights) << before.layers[i].name;
}

// The checking processes this process started that are running now (their name is cut to 15 bytes).
std::vector<pid_t> running_checking_processes() {
    std::vector<pid_t> found;
    for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream in(e.path() / "stat");
        const std::string stat((std::istreambuf_iterator<char>(in)), {});
        const auto open = stat.find('('), close = stat.rfind(')');
        if (open == std::string::npos || close == std::string::npos || close + 4 >= stat.size()) continue;
        const char state = stat[close + 2];
        const pid_t parent = pid_t(std::atol(stat.c_str() + close + 4));
        if (parent == ::getpid() && state != 'Z' && stat.substr(open + 1, close - open - 1) == "aimcemu-check-f")
            found.push_back(pid_t(std::stol(name)));
    }
    return found;
}

// The checking process is kept between model loads: successive loads are served by one process,
// which a refused file retires (the next load gets a fresh one), and one that ended between
// loads (here killed) is replaced without blaming the next file.
TEST_F(HostileFiles, TheCheckingProcessIsKeptBetweenLoadsAndReplacedAfterARefusedFile) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string model = (corpus / "fuzz_model_file" / "tiny.h5").string();
    const std::string bad_model = (corpus / "fuzz_model_file" / "bad-kind_unknown.h5").string();
    const std::string data = (corpus / "fuzz_dataset_file" / "tiny.h5").string();
    const Network direct = load_model_in_process(model);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    FileCheck check;
    load_model(model, data, check);
    const std::vector<pid_t> kept = running_checking_processes();
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_EQ(load_model(model).layers[0].weights, direct.layers[0].weights);
    EXPECT_EQ(running_checking_processes(), kept);

    const std::string refused = format_error_of([&] { load_model(bad_model); });
    EXPECT_EQ(refused.rfind(bad_model + ": field 'layers/", 0), 0u) << refused;
    EXPECT_TRUE(running_checking_processes().empty()) << "a process that refused a file is not kept";
    load_model(model);
    const std::vector<pid_t> fresh = running_checking_processes();
    ASSERT_EQ(fresh.size(), 1u);
    EXPECT_NE(fresh, kept);

    // An empty path goes to a fresh process (it cannot be sent to the kept one) and is refused as before.
    const std::string empty = format_error_of([&] { load_model(""); });
    EXPECT_EQ(empty, ": field 'file': no such file");
    EXPECT_EQ(running_checking_processes(), fresh);

    ::kill(fresh[0], SIGKILL);
    while (!running_checking_processes().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const Network after_kill = load_model(model);  // not "corrupt: reading it crashed"
    EXPECT_EQ(after_kill.layers[0].weights, direct.layers[0].weights);
    set_file_check_helper("");
}

// A child made by fork() starts a checking process of its own instead of using its parent's kept
// one, which keeps serving the parent.
TEST_F(HostileFiles, AKeptCheckingProcessServesOnlyTheProcessThatStartedIt) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string model = (corpus / "fuzz_model_file" / "tiny.h5").string();
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    load_model(model);
    const std::vector<pid_t> kept = running_checking_processes();
    ASSERT_EQ(kept.size(), 1u);
    const pid_t child = ::fork();
    if (child == 0) {
        bool ok = false;
        try {
            ok = load_model(model).layers.size() == 5 && running_checking_processes().size() == 1 &&
                 running_checking_processes() != kept;
        } catch (...) {
        }
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child did not load with a helper of its own";
    EXPECT_EQ(load_model(model).layers.size(), 5u);
    EXPECT_EQ(running_checking_processes(), kept);
    set_file_check_helper("");
}

// A relative path names a file in the loading process's working directory now, even when the kept
// checking process started in another: two folders hold a model.h5 of the same structure with
// other weights, loaded by the same kept process with a change of directory between the loads.
TEST_F(HostileFiles, TheKeptCheckingProcessReadsRelativePathsInTheCallersDirectoryNow) {
    fs::create_directories(path("a"));
    fs::create_directories(path("b"));
    save_model(zoo::resnet18(1, 32, 10), path("a/model.h5"));
    save_model(zoo::resnet18(2, 32, 10), path("b/model.h5"));
    fs::copy_file(path("a/model.h5"), path("a/only-in-a.h5"));
    const Network in_b = load_model_in_process(path("b/model.h5"));
    ASSERT_NE(load_model_in_process(path("a/model.h5")).layers[0].weights, in_b.layers[0].weights);
    const fs::path start = fs::current_path();
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    fs::current_path(path("a"));
    load_model("model.h5");
    const std::vector<pid_t> kept = running_checking_processes();
    fs::current_path(path("b"));
    const Network loaded = load_model("model.h5");
    const std::string missing = format_error_of([&] { load_model("only-in-a.h5"); });
    fs::current_path(start);
    set_file_check_helper("");
    ASSERT_EQ(kept.size(), 1u);
    for (std::size_t i = 0; i < in_b.layers.size(); ++i)
        EXPECT_TRUE(loaded.layers[i].weights == in_b.layers[i].weights) << in_b.layers[i].name;
    EXPECT_EQ(missing, "only-in-a.h5: field 'file': no such file");
}

// The kept checking process has the environment it started with: a change of this process's
// environment (HDF5_PLUGIN_PATH, say) starts a fresh one for the next load, which then stays.
TEST_F(HostileFiles, AChangedEnvironmentStartsAFreshCheckingProcess) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string model = (corpus / "fuzz_model_file" / "tiny.h5").string();
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    load_model(model);
    const std::vector<pid_t> before = running_checking_processes();
    ::setenv("AIMCEMU_TEST_ENVIRONMENT_CHANGE", "1", 1);
    load_model(model);
    const std::vector<pid_t> after = running_checking_processes();
    load_model(model);
    const std::vector<pid_t> again = running_checking_processes();
    ::unsetenv("AIMCEMU_TEST_ENVIRONMENT_CHANGE");
    set_file_check_helper("");
    ASSERT_EQ(before.size(), 1u);
    ASSERT_EQ(after.size(), 1u);
    EXPECT_NE(after, before);
    EXPECT_EQ(again, after);
}

// A hand-over that is not whole (a checking process damaged by the file it read, or of another
// version) is refused naming the file, never read past: here faked by helpers that report "ok" and
// hand over one weight too few or too many, a record cut short, a record of another version, or
// more than the memory file holds.
TEST_F(HostileFiles, ADamagedHandOverIsRefused) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string file = (corpus / "fuzz_model_file" / "tiny.h5").string();
    const Network net = load_model(file);  // no helper configured: read in-process
    const auto load_through = [&](const std::string& name, const std::string& report) {
        const std::string fake = path(name + ".sh");
        touch(fake, "#!/bin/sh\ncat '" + path(name + ".bin") + "' >&3\n" + print_report(report));
        fs::permissions(fake, fs::perms::owner_all);
        set_file_check_helper(fake);
        const std::string message = format_error_of([&] { load_model(file); });
        set_file_check_helper("");
        return message;
    };
    const std::string damaged = file + ": field 'file': the file check handed over a damaged model (";
    const auto expect_refused = [&](const std::string& message, const std::string& why) {
        EXPECT_EQ(message.rfind(damaged + why, 0), 0u) << message;
    };
    expect_refused(load_through("too-few", write_hand_over(net, path("too-few.bin"), -1)), "its weights run past");
    expect_refused(load_through("too-many", write_hand_over(net, path("too-many.bin"), 1)),
                   "1 weights handed over that no layer takes");

    const std::string report = write_hand_over(net, path("whole.bin"));
    const std::uint64_t structure = std::stoull(report.substr(report.rfind(' ') + 1));
    const std::string cut = report.substr(0, report.rfind(' ') + 1) + std::to_string(structure - 1);
    fs::copy_file(path("whole.bin"), path("cut.bin"));
    expect_refused(load_through("cut", cut), "it ends early");

    std::string other_version;
    {
        std::ifstream in(path("whole.bin"), std::ios::binary);
        other_version.assign(std::istreambuf_iterator<char>(in), {});
    }
    other_version[other_version.size() - structure + kModelStructureTag.size() - 2] = '9';
    std::ofstream(path("other-version.bin"), std::ios::binary) << other_version;
    expect_refused(load_through("other-version", report), "not a structure record of this version of aimcemu");

    const std::string beyond = report.substr(0, report.rfind(' ') + 1) + std::to_string(structure + 4096);
    fs::copy_file(path("whole.bin"), path("beyond.bin"));
    const std::string message = load_through("beyond", beyond);
    EXPECT_EQ(message.rfind(file + ": field 'file': cannot read the model the file check handed over", 0), 0u) << message;
}

// The model and the data set in one checking process: the model's problems raise at load_model,
// the data set's only when it is read, with the same message as a check of its own.
TEST_F(HostileFiles, ADataSetCheckedBesideTheModelRaisesWhenItIsRead) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string model = (corpus / "fuzz_model_file" / "tiny.h5").string();
    const std::string bad_model = (corpus / "fuzz_model_file" / "bad-kind_unknown.h5").string();
    const std::string data = (corpus / "fuzz_dataset_file" / "tiny.h5").string();
    const std::string bad_data = (corpus / "fuzz_dataset_file" / "bad-labels_negative.h5").string();
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const std::string alone = format_error_of([&] { load_dataset(bad_data); });
    FileCheck check;
    const Network net = load_model(model, bad_data, check);
    EXPECT_EQ(check.path, bad_data);
    const std::string beside = format_error_of([&] { load_dataset(bad_data, check); });
    EXPECT_EQ(beside, alone);
    EXPECT_EQ(beside.rfind(bad_data + ": field 'labels'", 0), 0u) << beside;

    FileCheck good;
    const Network same = load_model(model, data, good);
    EXPECT_FALSE(good.error.has_value());
    EXPECT_EQ(load_dataset(data, good).labels, load_dataset_in_process(data).labels);
    EXPECT_EQ(same.total_weights(), net.total_weights());

    FileCheck unused;
    const std::string model_error = format_error_of([&] { load_model(bad_model, data, unused); });
    EXPECT_EQ(model_error.rfind(bad_model + ": field 'layers/", 0), 0u) << model_error;
    set_file_check_helper("");
}

// A checking process that crashes on the data set, after handing over the model's weights, leaves
// the model loaded and refuses the data set, naming it, when it is read.
TEST_F(HostileFiles, ACrashOnTheDataSetBesideTheModelIsAFormatErrorOfTheDataSet) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string model = (corpus / "fuzz_model_file" / "tiny.h5").string();
    const std::string data = (corpus / "fuzz_dataset_file" / "tiny.h5").string();
    const Network net = load_model(model);  // no helper configured: read in-process
    const std::string fake = path("dies-on-the-data-set.sh");
    const std::string report = write_hand_over(net, path("model.bin"));
    touch(fake, "#!/bin/sh\ncat '" + path("model.bin") + "' >&3\n" + print_report(report) + "kill -SEGV $$\n");
    fs::permissions(fake, fs::perms::owner_all);
    set_file_check_helper(fake);
    FileCheck check;
    const Network loaded = load_model(model, data, check);
    const std::string message = format_error_of([&] { load_dataset(data, check); });
    set_file_check_helper("");
    EXPECT_EQ(loaded.layers.size(), net.layers.size());
    EXPECT_EQ(message.rfind(data + ": field 'file': corrupt: reading it crashed the HDF5 library", 0), 0u) << message;
    EXPECT_NE(message.find("signal 11"), std::string::npos) << message;
}

// Many files in one checking process: the first failure is reported, in order, and a crash is
// blamed on the file the helper had not finished.
TEST_F(HostileFiles, BatchesReportTheFirstFailureAndTheFileACrashHappenedOn) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string good = (corpus / "fuzz_results_file" / "noisy.h5").string();
    const std::string bad = (corpus / "fuzz_results_file" / "bad-accuracy_short.h5").string();
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    EXPECT_TRUE(check_in_helper(FileKind::Results, std::vector<std::string>(300, good)));  // two batches
    const std::string message = format_error_of([&] { check_in_helper(FileKind::Results, {good, bad, good}); });
    EXPECT_EQ(message.rfind(bad + ": field 'accuracy'", 0), 0u) << message;

    const std::string fake = path("dies-on-the-second.sh");
    touch(fake, "#!/bin/sh\n" + print_report("ok") + "kill -SEGV $$\n");
    fs::permissions(fake, fs::perms::owner_all);
    set_file_check_helper(fake);
    const std::string crash = format_error_of([&] { check_in_helper(FileKind::Results, {good, bad}); });
    set_file_check_helper("");
    EXPECT_EQ(crash.rfind(bad + ": field 'file': corrupt: reading it crashed", 0), 0u) << crash;
}

// ---- a file replaced (renamed over) between the checking process's read and this process's ----

namespace {

// Two checkpoints of one network: the same structure, other weights, biases and metadata.
Network checkpoint(std::uint64_t seed) {
    Network net = zoo::resnet18(seed, 32, 10);
    net.name = "checkpoint-" + std::to_string(seed);
    net.class_names.clear();
    for (int i = 0; i < 10; ++i) net.class_names.push_back("class-" + std::to_string(i) + "-of-" + std::to_string(seed));
    return net;
}

DataSet data_set(std::int8_t fill, std::int64_t label) {
    DataSet data;
    data.image_shape = {4, 4, 3};
    data.images.assign(2 * 4 * 4 * 3, fill);
    data.labels = {label, label + 1};
    data.input_frac_bits = 5;
    data.source = "data set " + std::to_string(fill);
    data.description = "images filled with " + std::to_string(fill);
    return data;
}

void expect_same_data(const DataSet& loaded, const DataSet& file) {
    EXPECT_EQ(loaded.images, file.images);
    EXPECT_EQ(loaded.labels, file.labels);
    EXPECT_EQ(loaded.source, file.source);
    EXPECT_EQ(loaded.description, file.description);
}

// Sets the between-reads hook for one scope: at the hook's call for `path`, `replace` runs once.
class ReplaceBetweenReads {
public:
    ReplaceBetweenReads(std::string path, std::function<void()> replace) {
        set_between_reads_hook_for_tests([this, path = std::move(path), replace = std::move(replace)](const std::string& p) {
            if (p != path || done_) return;
            done_ = true;
            replace();
        });
    }
    ~ReplaceBetweenReads() { set_between_reads_hook_for_tests({}); }
    bool done() const { return done_; }

private:
    bool done_ = false;
};

}  // namespace

// A training job saving checkpoints with rename() (as save_model does) may replace the model file
// while it loads: the network is then the file that was there when the load began, whole (its
// weights, biases and metadata), never one file's structure with the other's weights.  The hook
// renames the next checkpoint over the path right after the checking process read the file: once
// during a load served by the kept checking process, and once (from inside that load's hook, while
// the kept one is busy) during a load served by a fresh one.
TEST_F(HostileFiles, AModelFileRenamedOverDuringTheLoadLoadsWholeAsTheFileThatWasThere) {
    const std::string kept_path = path("kept.h5"), fresh_path = path("fresh.h5");
    save_model(checkpoint(1), kept_path);
    save_model(checkpoint(1), fresh_path);
    save_model(checkpoint(2), path("kept-next.h5"));
    save_model(checkpoint(2), path("fresh-next.h5"));
    const Network first = load_model_in_process(kept_path), second = load_model_in_process(path("kept-next.h5"));
    ASSERT_NE(first.name, second.name);
    ASSERT_FALSE(first.layers[0].weights == second.layers[0].weights);

    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    load_model(kept_path);  // starts the kept checking process
    ASSERT_EQ(running_checking_processes().size(), 1u);
    Network fresh_loaded;
    bool fresh_replaced = false;
    set_between_reads_hook_for_tests([&](const std::string& p) {
        if (p == kept_path) {
            fs::rename(path("kept-next.h5"), kept_path);
            fresh_loaded = load_model(fresh_path);  // the kept process is busy: a fresh one reads it
        } else if (p == fresh_path && !fresh_replaced) {
            fresh_replaced = true;
            fs::rename(path("fresh-next.h5"), fresh_path);
        }
    });
    Network kept_loaded;
    const std::string error = format_error_of([&] { kept_loaded = load_model(kept_path); });
    set_between_reads_hook_for_tests({});
    set_file_check_helper("");
    ASSERT_EQ(error, "(no error)");
    ASSERT_TRUE(fresh_replaced);
    expect_same_network(kept_loaded, first);
    expect_same_network(fresh_loaded, first);
    expect_same_network(load_model_in_process(kept_path), second);  // the path names the new file now
}

// The same for a data set file: read alone (its own checking process), and read beside the model
// (checked in the model's checking process, read by this one at load_dataset).
TEST_F(HostileFiles, ADataSetFileRenamedOverDuringTheLoadLoadsWholeAsTheFileThatWasThere) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string model = (corpus / "fuzz_model_file" / "tiny.h5").string();
    const std::string data = path("data.h5"), next = path("next.h5");
    const DataSet first = data_set(1, 0), second = data_set(2, 3);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);

    save_dataset(first, data);
    save_dataset(second, next);
    DataSet alone;
    {
        ReplaceBetweenReads replace(data, [&] { fs::rename(next, data); });
        alone = load_dataset(data);
        EXPECT_TRUE(replace.done());
    }
    expect_same_data(alone, first);

    save_dataset(first, data);
    save_dataset(second, next);
    DataSet beside;
    {
        ReplaceBetweenReads replace(data, [&] { fs::rename(next, data); });
        FileCheck check;
        load_model(model, data, check);
        EXPECT_TRUE(replace.done());
        beside = load_dataset(data, check);
    }
    set_file_check_helper("");
    expect_same_data(beside, first);
    expect_same_data(load_dataset_in_process(data), second);
}

// The same for a results file (read_results): the one that was there, not the one renamed over it.
TEST_F(HostileFiles, AResultsFileRenamedOverDuringTheReadIsReadWholeAsTheFileThatWasThere) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string results = path("run.h5"), next = path("next.h5");
    fs::copy_file(corpus / "fuzz_results_file" / "noisy.h5", results);
    fs::copy_file(corpus / "fuzz_results_file" / "digital.h5", next);
    const ResultsFileInfo first = read_results_in_process(results), second = read_results_in_process(next);
    ASSERT_NE(first.config_json, second.config_json);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    ResultsFileInfo loaded;
    {
        ReplaceBetweenReads replace(results, [&] { fs::rename(next, results); });
        loaded = read_results(results);
        EXPECT_TRUE(replace.done());
    }
    set_file_check_helper("");
    EXPECT_EQ(loaded.config_json, first.config_json);
    EXPECT_EQ(loaded.model, first.model);
    EXPECT_EQ(loaded.accuracy, first.accuracy);
    EXPECT_EQ(loaded.layer_names, first.layer_names);
    EXPECT_EQ(read_results_in_process(results).config_json, second.config_json);
}

// A sweep's task files, read in batches (read_results_files): each the file its batch's checking
// process read, not one renamed over it in between; in order, across two batches.
TEST_F(HostileFiles, ResultsFilesReadInBatchesAreTheFilesTheCheckingProcessRead) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const ResultsFileInfo noisy = read_results_in_process((corpus / "fuzz_results_file" / "noisy.h5").string());
    const ResultsFileInfo digital = read_results_in_process((corpus / "fuzz_results_file" / "digital.h5").string());
    ASSERT_NE(noisy.config_json, digital.config_json);
    std::vector<std::string> paths;
    for (std::size_t i = 0; i < kHelperBatchFiles + 2; ++i) {
        paths.push_back(path("task" + std::to_string(i) + ".h5"));
        fs::copy_file(corpus / "fuzz_results_file" / (i % 2 == 0 ? "noisy.h5" : "digital.h5"), paths.back());
    }
    fs::copy_file(corpus / "fuzz_results_file" / "digital.h5", path("next.h5"));
    const std::string replaced = paths[kHelperBatchFiles];  // the second batch's first file, a noisy one
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    std::vector<ResultsFileInfo> infos;
    {
        ReplaceBetweenReads replace(replaced, [&] { fs::rename(path("next.h5"), replaced); });
        infos = read_results_files(paths);
        EXPECT_TRUE(replace.done());
    }
    set_file_check_helper("");
    ASSERT_EQ(infos.size(), paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i)
        EXPECT_EQ(infos[i].config_json, (i % 2 == 0 ? noisy : digital).config_json) << paths[i];
    EXPECT_EQ(read_results_in_process(replaced).config_json, digital.config_json);
}

// The first failure of a batch read is the first in order, also when a later file is one that
// cannot even be opened, or a FIFO.
TEST_F(HostileFiles, ReadingResultsFilesInBatchesReportsTheFirstFailureInOrder) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string good = (corpus / "fuzz_results_file" / "noisy.h5").string();
    const std::string bad = (corpus / "fuzz_results_file" / "bad-accuracy_short.h5").string();
    ASSERT_EQ(::mkfifo(path("fifo.h5").c_str(), 0600), 0);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const std::string bad_first = format_error_of([&] { read_results_files({good, bad, path("missing.h5")}); });
    const std::string missing_first = format_error_of([&] { read_results_files({good, path("missing.h5"), bad}); });
    const std::string fifo = format_error_of([&] { read_results_files({good, path("fifo.h5")}); });
    set_file_check_helper("");
    EXPECT_EQ(bad_first.rfind(bad + ": field 'accuracy'", 0), 0u) << bad_first;
    EXPECT_EQ(missing_first, path("missing.h5") + ": field 'file': no such file");
    EXPECT_EQ(fifo.rfind(path("fifo.h5") + ": field 'file': is not a regular file", 0), 0u) << fifo;
}

// Each file of a batch on its own account (read_each_results_file): a broken file, a missing one and
// a FIFO each get, in its place, the error that reading it alone gives, and the sound files after them
// are read all the same.
TEST_F(HostileFiles, ReadingEachResultsFileGivesEveryFileItsOwnOutcome) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string good = (corpus / "fuzz_results_file" / "noisy.h5").string();
    const std::string bad = (corpus / "fuzz_results_file" / "bad-accuracy_short.h5").string();
    ASSERT_EQ(::mkfifo(path("fifo.h5").c_str(), 0600), 0);
    const std::vector<std::string> paths{good, bad, good, path("missing.h5"), path("fifo.h5"), good};
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const auto outcomes = read_each_results_file(paths);
    std::vector<std::string> alone;
    for (const auto& p : paths) alone.push_back(p == good ? "" : format_error_of([&] { read_results(p); }));
    set_file_check_helper("");
    const std::string expected_config = read_results_in_process(good).config_json;
    ASSERT_EQ(outcomes.size(), paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i) {
        if (paths[i] == good) {
            ASSERT_TRUE(std::holds_alternative<ResultsFileInfo>(outcomes[i])) << i;
            EXPECT_EQ(std::get<ResultsFileInfo>(outcomes[i]).config_json, expected_config) << i;
        } else {
            ASSERT_TRUE(std::holds_alternative<FormatError>(outcomes[i])) << i;
            EXPECT_EQ(std::get<FormatError>(outcomes[i]).what(), alone[i]) << i;
            EXPECT_EQ(alone[i].rfind(paths[i] + ": field '", 0), 0u) << alone[i];
        }
    }
}

// The checking process stops at the first file that fails: what a process whose libhdf5 may have
// been left damaged says of the files after it is not their own check's verdict.
TEST(CheckingProcess, StopsAtTheFirstFileThatFails) {
    const fs::path corpus = fs::path(AIMCEMU_FUZZ_CORPUS) / "fuzz_results_file";
    const std::string good = (corpus / "noisy.h5").string(), bad = (corpus / "bad-accuracy_short.h5").string();
    const std::string command = std::string(AIMCEMU_CHECK_FILE_HELPER) + " results '" + good + "' '" + bad + "' '" + good + "'";
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    for (char buffer[4096]; const std::size_t n = std::fread(buffer, 1, sizeof(buffer), pipe);) out.append(buffer, n);
    EXPECT_EQ(::pclose(pipe), 0);  // stopping there is no failure of the process
    const std::string refused = format_error_of([&] { read_results_in_process(bad); });
    const std::string prefix = bad + ": field 'accuracy': ";
    ASSERT_EQ(refused.rfind(prefix, 0), 0u) << refused;
    const std::string report = "format-error\n" + bad + std::string(1, '\0') + "accuracy" + std::string(1, '\0') +
                               refused.substr(prefix.size());
    EXPECT_EQ(out, helper_report_record("ok") + helper_report_record(report));
}

// A file that hangs the checking process (a fake one here, under a time limit of one second) costs
// the limit once: the process is killed there, the files after it go to a fresh one, and no file is
// asked for twice; the hung file's error names it, the others read.
TEST_F(HostileFiles, AFileThatHangsTheCheckingProcessCostsItsTimeLimitOnce) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string log = path("requests.log"), fake = path("hanging-helper.sh");
    touch(fake, "#!/bin/sh\necho \"$@\" >> '" + log + "'\n"
                "for p in \"$@\"; do case \"$p\" in --fds|results) ;; *hang.h5) exec sleep 60 ;; *) " +
                    print_report("ok").substr(0, print_report("ok").size() - 1) + " ;; esac; done\n");
    fs::permissions(fake, fs::perms::owner_all);
    std::vector<std::string> paths;
    for (const char* name : {"a.h5", "hang.h5", "b.h5", "c.h5"}) {
        paths.push_back(path(name));
        fs::copy_file(corpus / "fuzz_results_file" / "noisy.h5", paths.back());
    }
    set_file_check_helper(fake);
    set_check_time_limit_for_tests(1000);
    const auto start = std::chrono::steady_clock::now();
    const auto outcomes = read_each_results_file(paths);
    const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    set_check_time_limit_for_tests(0);
    set_file_check_helper("");
    std::ifstream requests(log);
    std::vector<std::string> lines;
    for (std::string line; std::getline(requests, line);) lines.push_back(line);
    const std::string after_hang = paths[2] + " " + paths[3];
    EXPECT_EQ(lines, (std::vector<std::string>{"--fds results " + paths[0] + " " + paths[1] + " " + after_hang,
                                               "--fds results " + after_hang}));
    ASSERT_EQ(outcomes.size(), paths.size());
    ASSERT_TRUE(std::holds_alternative<FormatError>(outcomes[1]));
    EXPECT_EQ(std::string(std::get<FormatError>(outcomes[1]).what()),
              paths[1] + ": field 'file': reading it did not finish within the time limit (a corrupt file can make the "
                         "HDF5 library loop); the file is not used");
    for (const std::size_t i : {0u, 2u, 3u}) EXPECT_TRUE(std::holds_alternative<ResultsFileInfo>(outcomes[i])) << i;
    EXPECT_LT(seconds, 2.0);  // the limit once (1 s), not twice
}

// The checking process's reports hold the path in messages: a path holding the bytes of any
// framing (record separators, digits, ':' and ',') is reported whole, for the file it names.
TEST_F(HostileFiles, APathHoldingAnyByteIsReportedWholeByTheCheckingProcess) {
    const fs::path corpus(AIMCEMU_FUZZ_CORPUS);
    const std::string odd_good = path("12:\x1e,ok\x1e" "good.h5"), odd_bad = path("3:\x1e\n,bad.h5");
    fs::copy_file(corpus / "fuzz_results_file" / "noisy.h5", odd_good);
    fs::copy_file(corpus / "fuzz_results_file" / "bad-accuracy_short.h5", odd_bad);
    set_file_check_helper(AIMCEMU_CHECK_FILE_HELPER);
    const std::string alone = format_error_of([&] { read_results(odd_bad); });
    const std::string batch = format_error_of([&] { read_results_files({odd_good, odd_bad}); });
    const std::string checked = format_error_of([&] { check_in_helper(FileKind::Results, {odd_good, odd_bad}); });
    EXPECT_EQ(read_results(odd_good).config_json, read_results_in_process(odd_good).config_json);
    set_file_check_helper("");
    const std::string in_process = format_error_of([&] { read_results_in_process(odd_bad); });
    EXPECT_EQ(alone.rfind(odd_bad + ": field 'accuracy'", 0), 0u) << alone;
    EXPECT_EQ(alone, in_process);
    EXPECT_EQ(batch, in_process);
    EXPECT_EQ(checked, in_process);
}

// A temporary file whose creation fails halfway (H5Fcreate made the file, then could not write
// the superblock: a full disk) is removed too.  Shown with a file system with room for inodes
// but not for data: a tmpfs of one page, mounted where root may mount (else skipped).
TEST_F(HostileFiles, AFailedCreateLeavesNoTemporaryFile) {
    const std::string disk = path("disk");
    fs::create_directory(disk);
    if (std::system(("mount -t tmpfs -o size=4k tmpfs " + disk + " 2>/dev/null").c_str()) != 0)
        GTEST_SKIP() << "cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)";
    {  // fill it
        std::ofstream fill(disk + "/fill", std::ios::binary);
        const std::string block(4096, 'x');
        for (int i = 0; i < 8 && fill; ++i) fill << block;
    }
    EXPECT_THROW(h5::AtomicFile{disk + "/out.h5"}, h5::Error);
    std::set<std::string> left;
    for (const auto& e : fs::directory_iterator(disk)) left.insert(e.path().filename().string());
    std::system(("umount -l " + disk).c_str());
    EXPECT_EQ(left, std::set<std::string>{"fill"});
}
