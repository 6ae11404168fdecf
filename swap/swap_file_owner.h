// Who holds a swap file: a running swapper keeps an exclusive flock on each of its swap files
// (SwapSpace), so a file nobody holds was left by a run that is gone, and a held one belongs to
// a live process that this finds by name. Linux lists every flock with its holder's pid and the
// file's device and inode in /proc/locks; that is where the pid comes from.
#pragma once

#include <string>

namespace strata {

// The pid of the process holding a flock on the file open as `fd`, or -1 when /proc/locks does
// not name one (another pid namespace, or the lock went away meanwhile).
int SwapFileLockHolder(int fd);

// "pid 123 (strata train --config c.json ...)" from /proc/<pid>/cmdline; for -1, "another
// process (its pid is not visible from here)".
std::string DescribeProcess(int pid);

}  // namespace strata
