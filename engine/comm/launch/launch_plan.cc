#include "engine/comm/launch/launch_plan.h"

#include <algorithm>
#include <charconv>
#include <set>

namespace strata {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool ParseInt(std::string_view s, int* out) {
  s = Trim(s);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t pos = 0;;) {
    const size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string_view::npos ? next : next - pos));
    if (next == std::string_view::npos) return out;
    pos = next + 1;
  }
}

const NodeSlots* FindHost(const std::vector<NodeSlots>& nodes, std::string_view host) {
  for (const auto& n : nodes) {
    if (n.host == host) return &n;
  }
  return nullptr;
}

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

Result<std::vector<NodeSlots>> ParseHostfile(std::string_view text, std::string_view filename) {
  std::vector<NodeSlots> out;
  int line_no = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_no;
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = std::string(filename) + ":" + std::to_string(line_no);
    const size_t space = line.find_first_of(" \t");
    const std::string_view host = line.substr(0, space);
    const std::string_view rest =
        space == std::string_view::npos ? std::string_view() : Trim(line.substr(space));
    int slots = 0;
    if (rest.substr(0, 6) != "slots=" || !ParseInt(rest.substr(6), &slots)) {
      return InvalidArgumentError("hostfile " + where + ": '" + std::string(line) +
                                  "' is not 'HOST slots=N'");
    }
    if (slots < 1) {
      return InvalidArgumentError("hostfile " + where + ": slots=" + std::to_string(slots) +
                                  " must be at least 1");
    }
    if (FindHost(out, host) != nullptr) {
      return InvalidArgumentError("hostfile " + where + ": host '" + std::string(host) +
                                  "' is listed twice");
    }
    NodeSlots node{std::string(host), {}};
    for (int i = 0; i < slots; ++i) node.slots.push_back(i);
    out.push_back(std::move(node));
  }
  if (out.empty()) {
    return InvalidArgumentError("hostfile " + std::string(filename) + ": no 'HOST slots=N' line");
  }
  return out;
}

Result<std::vector<NodeSlots>> FilterNodes(const std::vector<NodeSlots>& pool,
                                           std::string_view include, std::string_view exclude) {
  if (!include.empty() && !exclude.empty()) {
    return InvalidArgumentError("--include and --exclude are mutually exclusive");
  }
  if (include.empty() && exclude.empty()) return pool;
  const bool inc = !include.empty();
  const std::string flag = inc ? "--include" : "--exclude";
  std::vector<std::pair<std::string, std::set<int>>> chosen;  // include: what to keep
  std::vector<NodeSlots> result = pool;                       // exclude: what is left
  for (std::string_view part : Split(inc ? include : exclude, '@')) {
    part = Trim(part);
    const size_t colon = part.find(':');
    const std::string host(Trim(part.substr(0, colon)));
    const NodeSlots* node = FindHost(pool, host);
    if (node == nullptr) {
      return InvalidArgumentError(flag + ": host '" + host + "' is not in the hostfile");
    }
    std::set<int> slots;
    if (colon == std::string_view::npos) {
      slots.insert(node->slots.begin(), node->slots.end());
    } else {
      for (std::string_view s : Split(part.substr(colon + 1), ',')) {
        int slot = 0;
        if (!ParseInt(s, &slot)) {
          return InvalidArgumentError(flag + ": '" + std::string(s) + "' in '" + std::string(part) +
                                      "' is not a slot number");
        }
        if (std::find(node->slots.begin(), node->slots.end(), slot) == node->slots.end()) {
          return InvalidArgumentError(flag + ": host '" + host + "' has no slot " +
                                      std::to_string(slot) + " (slots " + JoinInts(node->slots) +
                                      ")");
        }
        slots.insert(slot);
      }
    }
    if (inc) {
      auto it = std::find_if(chosen.begin(), chosen.end(),
                             [&](const auto& c) { return c.first == host; });
      if (it == chosen.end()) {
        chosen.emplace_back(host, slots);
      } else {
        it->second.insert(slots.begin(), slots.end());
      }
    } else {
      for (auto& n : result) {
        if (n.host == host) std::erase_if(n.slots, [&](int s) { return slots.count(s) > 0; });
      }
    }
  }
  if (inc) {
    result.clear();
    for (const auto& n : pool) {  // the hostfile's order
      for (const auto& [host, slots] : chosen) {
        if (host == n.host) result.push_back({host, {slots.begin(), slots.end()}});
      }
    }
  }
  std::erase_if(result, [](const NodeSlots& n) { return n.slots.empty(); });
  if (result.empty()) return InvalidArgumentError(flag + " leaves no slot to run on");
  return result;
}

std::string FormatNodeSlots(const std::vector<NodeSlots>& nodes) {
  std::string s;
  for (const auto& n : nodes) s += (s.empty() ? "" : ";") + n.host + "=" + JoinInts(n.slots);
  return s;
}

Result<std::vector<NodeSlots>> ParseNodeSlots(std::string_view text) {
  std::vector<NodeSlots> out;
  for (std::string_view part : Split(text, ';')) {
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return InvalidArgumentError("--node_slots: '" + std::string(part) + "' is not HOST=S,S");
    }
    NodeSlots n{std::string(part.substr(0, eq)), {}};
    for (std::string_view s : Split(part.substr(eq + 1), ',')) {
      int slot = 0;
      if (!ParseInt(s, &slot)) {
        return InvalidArgumentError("--node_slots: '" + std::string(s) + "' is not a slot");
      }
      n.slots.push_back(slot);
    }
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::pair<int, int>> NodeOfRank(const std::vector<NodeSlots>& nodes, int rank) {
  int first = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int n = static_cast<int>(nodes[i].slots.size());
    if (rank >= first && rank < first + n) return std::pair(static_cast<int>(i), rank - first);
    first += n;
  }
  return InvalidArgumentError("rank " + std::to_string(rank) + " is past the " +
                              std::to_string(first) + " slots of the launch plan");
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./=:,@+%") == std::string::npos;
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

Result<LaunchPlan> MakeLaunchPlan(const LaunchRequest& r, const LaunchHost& host) {
  LaunchPlan plan;
  if (r.program.empty()) {
    return InvalidArgumentError("no program to launch (strata launch [flags] -- PROGRAM ARGS)");
  }
  const bool filters = !r.include.empty() || !r.exclude.empty();
  if (filters && (r.num_nodes > 0 || r.num_gpus > 0 || r.num_procs > 0)) {
    return InvalidArgumentError(
        "--num_nodes/--num_gpus/--num_procs cannot be combined with --include/--exclude");
  }
  if (r.num_procs > 0 && r.num_gpus > 0) {
    return InvalidArgumentError("--num_procs (CPU ranks) and --num_gpus are mutually exclusive");
  }
  if (r.num_procs > 0 && !r.hostfile_text.empty()) {
    return InvalidArgumentError(
        "--num_procs runs ranks on this machine; with a hostfile use "
        "--num_gpus (ranks per node) or the hostfile's slots");
  }
  std::vector<NodeSlots> pool;
  std::string include = r.include;
  if (!r.hostfile_text.empty()) {
    STRATA_ASSIGN_OR_RETURN(pool, ParseHostfile(r.hostfile_text, r.hostfile_name));
    plan.set_cuda_visible = true;
  } else if (r.num_procs > 0) {
    pool.push_back({"localhost", {}});
    for (int i = 0; i < r.num_procs; ++i) pool[0].slots.push_back(i);
  } else {
    int count = r.num_gpus > 0 ? r.num_gpus : host.gpu_count;
    if (host.has_cuda_visible_devices) {
      // DeepSpeed: the visible set becomes --include localhost:<list>, unless flags choose.
      if (filters || r.num_gpus > 0 || r.num_nodes > 1) {
        plan.notes.push_back("CUDA_VISIBLE_DEVICES=" + host.cuda_visible_devices +
                             " ignored: --include/--exclude/--num_gpus/--num_nodes choose");
      } else if (!host.cuda_visible_devices.empty()) {
        include = "localhost:" + host.cuda_visible_devices;
        plan.notes.push_back("CUDA_VISIBLE_DEVICES=" + host.cuda_visible_devices +
                             ": using --include " + include);
        int max_id = 0;
        for (std::string_view s : Split(host.cuda_visible_devices, ',')) {
          int id = 0;
          if (!ParseInt(s, &id)) {
            return InvalidArgumentError("CUDA_VISIBLE_DEVICES='" + host.cuda_visible_devices +
                                        "': only device indices are understood");
          }
          max_id = std::max(max_id, id);
        }
        count = std::max(count, max_id + 1);
      }
    }
    if (count < 1) {
      return InvalidArgumentError(
          "no GPU found on this machine: pass --num_procs N for N CPU ranks (or --num_gpus N)");
    }
    pool.push_back({"localhost", {}});
    for (int i = 0; i < count; ++i) pool[0].slots.push_back(i);
    plan.set_cuda_visible = true;
  }
  STRATA_ASSIGN_OR_RETURN(plan.nodes, FilterNodes(pool, include, r.exclude));
  if (r.num_nodes > 0 && static_cast<size_t>(r.num_nodes) < plan.nodes.size()) {
    plan.nodes.resize(static_cast<size_t>(r.num_nodes));
  }
  if (r.num_gpus > 0) {
    for (auto& n : plan.nodes) {
      n.slots.clear();
      for (int i = 0; i < r.num_gpus; ++i) n.slots.push_back(i);
    }
  }
  for (const auto& n : plan.nodes) {
    plan.world_size += static_cast<int>(n.slots.size());
    plan.local &= n.host == "localhost" || n.host == "127.0.0.1";
  }
  plan.master_addr = !r.master_addr.empty() ? r.master_addr
                     : plan.local           ? "127.0.0.1"
                                            : plan.nodes.front().host;

  auto& a = plan.mpirun_argv;
  a.push_back(host.mpirun);
  if (host.is_root) {
    a.push_back("--allow-run-as-root");
    plan.notes.push_back("running as root: added --allow-run-as-root");
  }
  const int local_ranks = plan.local ? plan.world_size : 0;
  if (local_ranks > host.cpu_cores) {
    a.push_back("--oversubscribe");
    plan.notes.push_back(std::to_string(local_ranks) + " ranks on " +
                         std::to_string(host.cpu_cores) + " core(s): added --oversubscribe");
  }
  std::string hosts;
  for (const auto& n : plan.nodes) {
    hosts += (hosts.empty() ? "" : ",") + n.host + ":" + std::to_string(n.slots.size());
  }
  for (const std::string& w :
       {std::string("-np"), std::to_string(plan.world_size), std::string("--host"), hosts,
        std::string("--map-by"), std::string("slot"), std::string("--bind-to"), std::string("none"),
        std::string("-x"), "MASTER_ADDR=" + plan.master_addr, std::string("-x"),
        "MASTER_PORT=" + std::to_string(r.master_port), host.self_exe, std::string("launch"),
        std::string("--as_rank"), std::string("--node_slots"), FormatNodeSlots(plan.nodes)}) {
    a.push_back(w);
  }
  if (plan.set_cuda_visible) a.push_back("--set_cuda_visible_devices");
  if (!r.bind_cores) a.push_back("--no-bind_cores_to_rank");
  if (!r.log_dir.empty()) {
    a.push_back("--log_dir");
    a.push_back(r.log_dir);
  }
  a.push_back("--");
  a.insert(a.end(), r.program.begin(), r.program.end());
  return plan;
}

}  // namespace strata
