// LaunchPlan: what `strata launch` turns DeepSpeed's launcher flags into — the hosts and slots
// (devices) to use and the `mpirun` command that starts one rank per slot. Pure functions, so
// hostfile syntax, --include/--exclude filtering and the command line are unit-tested without
// starting anything. The process side (forking mpirun, the per-rank wrapper) is in
// tools/strata/cmd_launch.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

// One host and the slot ids (GPU indices) a job may use on it.
struct NodeSlots {
  std::string host;
  std::vector<int> slots;
  friend bool operator==(const NodeSlots&, const NodeSlots&) = default;
};

// DeepSpeed's hostfile: one "host slots=N" per line; blank lines and '#' comments ignored.
// InvalidArgument naming `filename`:line for a malformed line, N < 1 or a host given twice.
Result<std::vector<NodeSlots>> ParseHostfile(std::string_view text, std::string_view filename);

// DeepSpeed's --include / --exclude ("host1:0,1@host2": slots 0 and 1 of host1, all of host2).
// At most one of the two; every host and slot named must be in `pool`. The result keeps the
// pool's host order, sorted unique slots, and drops hosts left without slots.
Result<std::vector<NodeSlots>> FilterNodes(const std::vector<NodeSlots>& pool,
                                           std::string_view include, std::string_view exclude);

struct LaunchRequest {
  int num_gpus = -1;          // --num_gpus: ranks per node as GPU slots 0..N-1 (-1: all)
  int num_procs = -1;         // --num_procs: N CPU ranks on this machine (no device handling)
  int num_nodes = -1;         // --num_nodes: the first K hosts (-1: all)
  std::string hostfile_text;  // contents of --hostfile ("" when none)
  std::string hostfile_name;
  std::string include, exclude;
  std::string master_addr;  // "" = first host (127.0.0.1 when local)
  int master_port = 29500;
  std::string log_dir;
  bool bind_cores = true;
  std::vector<std::string> program;  // PROGRAM ARGS
};

// What the machine running the launcher looks like.
struct LaunchHost {
  std::string cuda_visible_devices;  // value of CUDA_VISIBLE_DEVICES
  bool has_cuda_visible_devices = false;
  int gpu_count = 0;  // visible GPUs when no hostfile (0 = none)
  int cpu_cores = 1;  // cores this process may use
  bool is_root = false;
  std::string mpirun = "mpirun";
  std::string self_exe = "strata";  // re-run per rank as `strata launch --as_rank ...`
};

struct LaunchPlan {
  std::vector<NodeSlots> nodes;
  int world_size = 0;
  bool local = true;              // every rank on this machine
  bool set_cuda_visible = false;  // ranks get CUDA_VISIBLE_DEVICES = their node's slots
  std::string master_addr;
  std::vector<std::string> mpirun_argv;
  std::vector<std::string> notes;  // one line each, printed with --dry-run and at start
};

// DeepSpeed's rules: --num_nodes/--num_gpus exclude --include/--exclude; without a hostfile the
// pool is localhost with one slot per GPU (or --num_procs CPU ranks); CUDA_VISIBLE_DEVICES
// without those flags becomes --include localhost:<its list> and the ranks see it renumbered.
Result<LaunchPlan> MakeLaunchPlan(const LaunchRequest& request, const LaunchHost& host);

// "h1=0,1;h2=0,1,2" and back (the per-rank wrapper's --node_slots).
std::string FormatNodeSlots(const std::vector<NodeSlots>& nodes);
Result<std::vector<NodeSlots>> ParseNodeSlots(std::string_view text);
// The node that global `rank` runs on under `mpirun --map-by slot` (ranks fill hosts in order):
// its index, and the rank's index on it.
Result<std::pair<int, int>> NodeOfRank(const std::vector<NodeSlots>& nodes, int rank);

// argv as one line a shell would run (words quoted where needed).
std::string ShellJoin(const std::vector<std::string>& argv);

}  // namespace strata
