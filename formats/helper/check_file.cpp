// aimcemu-check-file KIND PATH...: reads user files as the library would (KIND = model, dataset,
// dataset-header or results) and reports on stdout how each went, for formats/untrusted_file.hpp.
// aimcemu-check-file --fds KIND PATH...: the same, reading the i-th file from descriptor 4 + i (the
// caller opened it, and reads the same file afterwards); PATH only names it in the reports.
// aimcemu-check-file serve: the same for requests read from stdin (below), one after another, so
// that one process serves a sweep's model loads (the checking process kept between loads).
// A file that crashes the HDF5 library crashes this process, not the caller's; the first file that
// fails ends the request (check_all), the files after it are not read.
// KIND model-weights (one model file, then optionally one data set file): the model's every GEMM
// layer's weights, in the order of the layers read, are read straight into the memory file on
// descriptor 3, followed by the structure record of the rest (check_model_in_helper,
// hand_model_over, model_handover.hpp), before "ok\nweights N structure M" (N bytes of weights, M
// of the record) is reported; the graph checks are left to the caller.  The second file is read as a
// data set, in the same process; with KIND model-weights+dataset-header, as a data set's header
// (KIND dataset-header: every field but the images' values, load_dataset_header), as a sweep's
// plan reads it.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "formats/model_file.hpp"
#include "formats/results_reader.hpp"
#include "formats/untrusted_file.hpp"

namespace {

// Reads one file (the one open on `fd`, when >= 0); the report as described in
// formats/untrusted_file.cpp.
std::string check(const std::string& kind, const std::string& path, int fd) {
    using namespace aimcemu;
    try {
        if (kind == "model-weights") {
            const auto handed = hand_model_over(path, aimcemu::kHelperHandoverFd, fd);
            return "ok\nweights " + std::to_string(handed.weights) + " structure " + std::to_string(handed.structure);
        }
        if (kind == "model") load_model_in_process(path, fd);
        else if (kind == "dataset") load_dataset_in_process(path, fd);
        else if (kind == "dataset-header") load_dataset_header_in_process(path, fd);
        else read_results_in_process(path, fd);
        return "ok";
    } catch (const FormatError& e) {
        const std::string what = e.what();
        const std::string prefix = e.source() + ": field '" + e.field() + "': ";
        return "format-error\n" + e.source() + '\0' + e.field() + '\0' +
               (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
    } catch (const std::exception& e) {
        return std::string("error\n") + e.what();
    }
}

bool is_model_weights(const std::string& kind) {
    return kind == "model-weights" || kind == "model-weights+dataset-header";
}

bool valid_request(const std::string& kind, std::size_t paths) {
    if (is_model_weights(kind)) return paths == 1 || paths == 2;
    return paths >= 1 && (kind == "model" || kind == "dataset" || kind == "dataset-header" || kind == "results");
}

// How the i-th file of a request of `kind` is read: a model-weights request's model, then its data set.
std::string kind_of_file(const std::string& kind, std::size_t i) {
    if (!is_model_weights(kind)) return kind;
    if (i == 0) return "model-weights";
    return kind == "model-weights" ? "dataset" : "dataset-header";
}

// Reads each file of one request and reports it, one record per file, in order; `fds` (empty: open
// the paths) holds each file's descriptor.  Stops at the first file that fails, and returns false
// then: a corrupt file may leave the HDF5 library's state damaged, so what this process would say of
// the files after it is not their own check's verdict (the caller checks them in a fresh process).
bool check_all(const std::string& kind, const std::vector<std::string>& paths, const std::vector<int>& fds) {
    for (std::size_t i = 0; i < paths.size(); ++i) {
        const std::string report = check(kind_of_file(kind, i), paths[i], fds.empty() ? -1 : fds[i]);
        const std::string record = aimcemu::helper_report_record(report);
        std::fwrite(record.data(), 1, record.size(), stdout);
        std::fflush(stdout);  // what is reported stays reported if a later file crashes this process
        if (report != "ok" && report.rfind("ok\n", 0) != 0) return false;
    }
    return true;
}

// The requests on stdin (a socket), with the descriptors sent beside their bytes (SCM_RIGHTS), in
// the order they came.  stdio cannot read them: read() drops the descriptors a message carries.
class RequestChannel {
public:
    // The next byte; EOF at the end of the input (or an error reading it).
    int next() {
        if (at_ == buffer_.size() && !fill()) return EOF;
        return static_cast<unsigned char>(buffer_[at_++]);
    }
    // The descriptors received so far and not yet taken, oldest first; false when fewer than `count`.
    bool take(std::size_t count, std::vector<int>& out) {
        if (received_.size() < count) return false;
        out.assign(received_.begin(), received_.begin() + std::ptrdiff_t(count));
        received_.erase(received_.begin(), received_.begin() + std::ptrdiff_t(count));
        return true;
    }

private:
    bool fill() {
        buffer_.resize(4096);
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
        iovec bytes{buffer_.data(), buffer_.size()};
        msghdr message{};
        message.msg_iov = &bytes;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof(control);
        ssize_t n;
        while ((n = ::recvmsg(STDIN_FILENO, &message, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
        }
        if (n <= 0) return false;
        for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (std::size_t i = 0; i < count; ++i) {
                int fd;
                std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                received_.push_back(fd);
            }
        }
        buffer_.resize(std::size_t(n));
        at_ = 0;
        return true;
    }
    std::string buffer_;
    std::size_t at_ = 0;
    std::deque<int> received_;
};

// serve: requests on stdin, each KIND \0 PATH \0 ... \0 and an empty string (\0) to end it, sent with
// one descriptor per PATH (the file the caller opened: PATH only names it), answered as the command
// line's; until the end of the input (the caller ended or retired this process), or a file that
// failed (check_all: the caller retires a process that refused a file anyway).
int serve() {
    RequestChannel channel;
    std::vector<std::string> fields;
    std::string field;
    for (int c; (c = channel.next()) != EOF;) {
        if (c != '\0') {
            field += char(c);
        } else if (!field.empty()) {
            fields.push_back(std::move(field));
            field.clear();
        } else {
            std::vector<int> fds;
            if (fields.empty() || !valid_request(fields[0], fields.size() - 1) || !channel.take(fields.size() - 1, fds))
                return 2;
            const bool all_read = check_all(fields[0], {fields.begin() + 1, fields.end()}, fds);
            for (const int fd : fds) ::close(fd);
            if (!all_read) return 0;
            fields.clear();
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 1 && args[0] == "serve") return serve();
    const bool from_fds = !args.empty() && args[0] == "--fds";
    if (from_fds) args.erase(args.begin());
    if (args.size() < 2 || !valid_request(args[0], args.size() - 1)) {
        std::fprintf(stderr, "usage: aimcemu-check-file [--fds] model|dataset|dataset-header|results PATH...  |  [--fds] "
                             "model-weights[+dataset-header] MODEL [DATASET]  |  serve\n");
        return 2;
    }
    std::vector<int> fds;
    for (std::size_t i = 0; from_fds && i + 1 < args.size(); ++i) fds.push_back(aimcemu::kHelperFirstFileFd + int(i));
    check_all(args[0], {args.begin() + 1, args.end()}, fds);  // stopped at a file that failed: not an error of this process
    return 0;
}
