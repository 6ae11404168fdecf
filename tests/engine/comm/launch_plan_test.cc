// `strata launch`'s pure parts: DeepSpeed hostfiles, --include/--exclude, and the mpirun command.
#include "engine/comm/launch/launch_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

const char kHostfile[] =
    "# two workers\n"
    "worker-1 slots=4\n"
    "\n"
    "worker-2 slots=2   # a smaller one\n";

std::vector<NodeSlots> Pool() { return *ParseHostfile(kHostfile, "hostfile"); }

TEST(HostfileTest, ParsesHostSlotsLinesSkippingCommentsAndBlanks) {
  EXPECT_THAT(Pool(),
              ElementsAre(NodeSlots{"worker-1", {0, 1, 2, 3}}, NodeSlots{"worker-2", {0, 1}}));
}

TEST(HostfileTest, NamesTheLineOfAMalformedEntry) {
  EXPECT_THAT(ParseHostfile("a slots=2\nb slot=2\n", "hf"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("hostfile hf:2: 'b slot=2'")));
  EXPECT_THAT(ParseHostfile("a slots=0\n", "hf"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("at least 1")));
  EXPECT_THAT(ParseHostfile("a slots=1\na slots=2\n", "hf"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("listed twice")));
  EXPECT_THAT(ParseHostfile("# nothing\n", "hf"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no 'HOST slots=N' line")));
}

TEST(FilterNodesTest, IncludeKeepsNamedSlotsInHostfileOrder) {
  auto r = FilterNodes(Pool(), "worker-2@worker-1:2,0", "");
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_THAT(*r, ElementsAre(NodeSlots{"worker-1", {0, 2}}, NodeSlots{"worker-2", {0, 1}}));
}

TEST(FilterNodesTest, ExcludeDropsSlotsAndEmptiedHosts) {
  auto r = FilterNodes(Pool(), "", "worker-1:0,1@worker-2");
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_THAT(*r, ElementsAre(NodeSlots{"worker-1", {2, 3}}));
}

TEST(FilterNodesTest, RejectsUnknownHostsSlotsAndBothFlags) {
  EXPECT_THAT(FilterNodes(Pool(), "worker-9", ""),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("host 'worker-9' is not")));
  EXPECT_THAT(FilterNodes(Pool(), "worker-2:5", ""),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("has no slot 5 (slots 0,1)")));
  EXPECT_THAT(FilterNodes(Pool(), "worker-2:x", ""),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not a slot number")));
  EXPECT_THAT(FilterNodes(Pool(), "worker-1", "worker-2"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("mutually exclusive")));
  EXPECT_THAT(FilterNodes(Pool(), "", "worker-1@worker-2"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("leaves no slot")));
}

TEST(NodeSlotsTest, RoundTripsAndMapsRanksToNodesInSlotOrder) {
  const std::string text = FormatNodeSlots(Pool());
  EXPECT_EQ(text, "worker-1=0,1,2,3;worker-2=0,1");
  EXPECT_THAT(*ParseNodeSlots(text),
              ElementsAre(NodeSlots{"worker-1", {0, 1, 2, 3}}, NodeSlots{"worker-2", {0, 1}}));
  EXPECT_EQ(*NodeOfRank(Pool(), 3), std::pair(0, 3));
  EXPECT_EQ(*NodeOfRank(Pool(), 5), std::pair(1, 1));
  EXPECT_THAT(NodeOfRank(Pool(), 6), StatusIs(StatusCode::kInvalidArgument, HasSubstr("past")));
}

LaunchHost RootOnTwoCores() {
  LaunchHost h;
  h.is_root = true;
  h.cpu_cores = 2;
  h.self_exe = "/bin/strata";
  return h;
}

TEST(LaunchPlanTest, NumProcsStartsLocalCpuRanksWithTheFlagsThisMachineNeeds) {
  LaunchRequest r;
  r.num_procs = 3;
  r.program = {"./train", "--lr", "1e-3 x"};
  auto plan = MakeLaunchPlan(r, RootOnTwoCores());
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(plan->world_size, 3);
  EXPECT_FALSE(plan->set_cuda_visible);
  EXPECT_EQ(ShellJoin(plan->mpirun_argv),
            "mpirun --allow-run-as-root --oversubscribe -np 3 --host localhost:3 --map-by slot "
            "--bind-to none -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 /bin/strata launch "
            "--as_rank --node_slots localhost=0,1,2 -- ./train --lr '1e-3 x'");
  EXPECT_THAT(plan->notes, ElementsAre(HasSubstr("--allow-run-as-root"),
                                       HasSubstr("3 ranks on 2 core(s): added --oversubscribe")));
}

TEST(LaunchPlanTest, CudaVisibleDevicesBecomesIncludeAsInDeepSpeed) {
  LaunchRequest r;
  r.program = {"p"};
  LaunchHost h;
  h.has_cuda_visible_devices = true;
  h.cuda_visible_devices = "2,3";
  h.gpu_count = 2;  // as counted through the visible set
  h.cpu_cores = 8;
  auto plan = MakeLaunchPlan(r, h);
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_THAT(plan->nodes, ElementsAre(NodeSlots{"localhost", {2, 3}}));
  EXPECT_TRUE(plan->set_cuda_visible);
  EXPECT_THAT(plan->notes, ElementsAre(HasSubstr("using --include localhost:2,3")));
}

TEST(LaunchPlanTest, HostfileWithNumNodesAndNumGpus) {
  LaunchRequest r;
  r.hostfile_text = kHostfile;
  r.hostfile_name = "hf";
  r.num_nodes = 1;
  r.num_gpus = 2;
  r.log_dir = "/tmp/logs";
  r.program = {"p"};
  auto plan = MakeLaunchPlan(r, LaunchHost{});
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_THAT(plan->nodes, ElementsAre(NodeSlots{"worker-1", {0, 1}}));
  EXPECT_EQ(plan->master_addr, "worker-1");
  EXPECT_THAT(ShellJoin(plan->mpirun_argv),
              HasSubstr("-np 2 --host worker-1:2 --map-by slot --bind-to none -x "
                        "MASTER_ADDR=worker-1 -x MASTER_PORT=29500 strata launch --as_rank "
                        "--node_slots worker-1=0,1 --set_cuda_visible_devices --log_dir /tmp/logs "
                        "-- p"));
}

TEST(LaunchPlanTest, RejectsFlagCombinationsDeepSpeedRejects) {
  LaunchRequest r;
  r.program = {"p"};
  r.num_gpus = 2;
  r.include = "localhost:0";
  EXPECT_THAT(MakeLaunchPlan(r, LaunchHost{}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("cannot be combined")));
  LaunchRequest none;
  none.program = {"p"};
  EXPECT_THAT(MakeLaunchPlan(none, LaunchHost{}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--num_procs N")));
  LaunchRequest empty;
  EXPECT_THAT(MakeLaunchPlan(empty, LaunchHost{}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no program")));
}

}  // namespace
}  // namespace strata
