// Names of the hidden temporary files that atomic writers use, and the clean-up of those that
// killed processes left behind.
//
// Every file aimcemu writes (results, models, data sets, sweep indexes, reports) is written as a
// hidden temporary file beside its target and renamed over it when complete.  A process killed
// with SIGKILL (or by the OOM killer, or a power cut) cannot remove its temporary file, so the
// name says who wrote it:
//
//     .NAME.tmp-HOST-PID-N      HOST: this machine's tag (host_tag_of: [A-Za-z0-9_.], at most
//                               32 chars), PID: the writing process, N: a per-process counter
//
// A temporary file is *stale* when its writer is certainly gone: written on this host, and the
// process PID no longer exists, is a zombie, or started after the file was last modified (the
// PID was reused).  Files of other hosts (a sweep folder on a shared file system) and of live
// processes are never touched.  Names without HOST (.NAME.tmp-PID-N, the form used before the
// host was added) are taken to come from this host.
#pragma once
#include <string>
#include <system_error>
#include <vector>

namespace aimcemu::files {

// The tag of the host named `host_name`, for processes in the PID namespace `pid_namespace` (the
// link /proc/self/ns/pid, "" when unknown): the name's first 23 characters made file-name safe
// ('_' for any other), then '.' and 8 hex digits of a digest of the whole name and the
// namespace.  The digest keeps apart what a cut name would join: hosts whose names share their
// first characters (a cluster's pods, "aimcemu-dask-worker-7d9f8b6c5-abcde" and "...-abxyz") and
// containers that share a host name but not their PIDs; either would otherwise remove the other's
// live temporary files as its own stale ones.  Tags written before the digest (the cut name
// alone) are then another host's, and left alone.
std::string host_tag_of(const std::string& host_name, const std::string& pid_namespace);
// This process's tag: host_tag_of(its host name, its PID namespace).
const std::string& host_tag();

// A fresh temporary name beside `target` (same folder, so the final rename is atomic): unique
// per process and call.
std::string temporary_path_for(const std::string& target);

// Parsed parts of a temporary file name; ok = false when `name` is not one.
struct TemporaryName {
    bool ok = false;
    std::string target;  // NAME: the file it was to become
    std::string host;    // empty for the old form without a host
    long long pid = 0;
};
TemporaryName parse_temporary_name(const std::string& file_name);

// True when the process `pid` of this host is certainly not the writer of a file last modified
// at `modified_unix_s` (see the file comment).
bool writer_is_gone(long long pid, double modified_unix_s);

// Renames `from` to `to` only if `to` does not exist (atomically: renameat2 RENAME_NOREPLACE,
// or link + unlink where the file system lacks it); ec = file_exists when it does.
void rename_no_replace(const std::string& from, const std::string& to, std::error_code& ec);

// Removes every stale temporary file directly inside `folder` (not recursive; regular files
// only) and returns their paths.  Errors (a folder that cannot be listed, a file another
// process removed first) are ignored: clean-up must never make a run fail.
std::vector<std::string> remove_stale_temporaries(const std::string& folder);

}  // namespace aimcemu::files
