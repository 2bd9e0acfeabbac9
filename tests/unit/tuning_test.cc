// The selector, NCCL_ALGO / NCCL_PROTO parsing and the double binary tree.
#include "tuning/tuning.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <set>

#include "topology/trees.h"
#include "util/param.h"

namespace braid {
namespace {

class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
    ParamRegistry::instance().reload();
  }
  ~EnvGuard() {
    unsetenv(name_);
    ParamRegistry::instance().reload();
  }

 private:
  const char* name_;
};

TuneInput input(CollType c, size_t bytes, int nranks, int nnodes = 1, int maxChannels = 1) {
  return TuneInput{c, bytes, nranks, nnodes, nranks / nnodes, maxChannels};
}

TEST(AlgoFilter, ListsExclusionsAndPerCollective) {
  AlgoFilter f;
  ASSERT_TRUE(parseAlgoFilter("Ring,tree", &f).ok());
  EXPECT_TRUE(f.allowed[0][static_cast<int>(Algo::Ring)]);
  EXPECT_TRUE(f.allowed[0][static_cast<int>(Algo::Tree)]);
  EXPECT_FALSE(f.allowed[0][static_cast<int>(Algo::Direct)]);
  ASSERT_TRUE(parseAlgoFilter("^TREE", &f).ok());
  EXPECT_TRUE(f.allowed[0][static_cast<int>(Algo::Direct)]);
  EXPECT_FALSE(f.allowed[0][static_cast<int>(Algo::Tree)]);
  ASSERT_TRUE(parseAlgoFilter("allreduce:tree;broadcast:ring", &f).ok());
  EXPECT_FALSE(f.allowed[static_cast<int>(CollType::AllReduce)][static_cast<int>(Algo::Ring)]);
  EXPECT_TRUE(f.allowed[static_cast<int>(CollType::AllReduce)][static_cast<int>(Algo::Tree)]);
  EXPECT_TRUE(
      f.allowed[static_cast<int>(CollType::AllGather)][static_cast<int>(Algo::Direct)]);  // unnamed: all
  ASSERT_TRUE(parseAlgoFilter("NVLS,CollNetDirect,PAT", &f).ok());  // NCCL's: accepted, never chosen
  Status bad = parseAlgoFilter("Ring,Bogus", &f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("Bogus"), std::string::npos);
  EXPECT_FALSE(parseAlgoFilter("allgahter:ring", &f).ok());
  ASSERT_TRUE(parseProtoFilter("^LL128", &f).ok());
  EXPECT_TRUE(f.allowed[0][static_cast<int>(Protocol::LL)]);
  EXPECT_FALSE(f.allowed[0][static_cast<int>(Protocol::LL128)]);
  EXPECT_FALSE(parseProtoFilter("LL256", &f).ok());
  // Lists naming nothing were taken as allowing nothing, then overridden.
  for (const char* empty : {",", "allreduce:", "allreduce: ;broadcast:ring", "^", " , "}) {
    Status s = parseAlgoFilter(empty, &f);
    EXPECT_FALSE(s.ok()) << empty;
    EXPECT_NE(s.message().find("no algorithm named"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(parseProtoFilter(",", &f).ok());
  EXPECT_TRUE(parseAlgoFilter("", &f).ok());  // unset: the selector chooses
}

TEST(AlgoFilter, BadValueFailsValidationNamingTheVariable) {
  EnvGuard g("NCCL_ALGO", "Rnig");
  Status s = ParamRegistry::instance().validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("NCCL_ALGO"), std::string::npos) << s.message();
}

TEST(Selector, SmallAllReduceIsDirectLargeIsRingSimple) {
  TuneChoice small = selectAlgorithm(input(CollType::AllReduce, 8, 4));
  EXPECT_EQ(small.algo, Algo::Direct);
  TuneChoice large = selectAlgorithm(input(CollType::AllReduce, 64 << 20, 4, 1, 8));
  EXPECT_EQ(large.algo, Algo::Ring);
  EXPECT_EQ(large.proto, Protocol::Simple);
  EXPECT_GT(large.nChannels, 1);
  EXPECT_LE(large.nChannels, 8);
  // Ranks sharing cores: every step costs a context switch, so the one
  // exchange of Direct wins for longer.
  TuneInput shared = input(CollType::AllReduce, 4096, 4);
  EXPECT_NE(selectAlgorithm(shared).algo, Algo::Direct);
  shared.cores = 2;
  EXPECT_EQ(selectAlgorithm(shared).algo, Algo::Direct);
  // Too many ranks for one-shot.
  EXPECT_NE(selectAlgorithm(input(CollType::AllReduce, 8, 16)).algo, Algo::Direct);
  // Across many nodes the tree's logarithmic depth wins for small messages.
  EXPECT_EQ(selectAlgorithm(input(CollType::AllReduce, 1024, 64, 64)).algo, Algo::Tree);
  // Other collectives: small ones of one host in one exchange on the host
  // backend (collectives/direct.h); Ring for large ones, across nodes and
  // on GPUs, where only Ring implements them.
  for (CollType c : {CollType::AllGather, CollType::ReduceScatter, CollType::Broadcast, CollType::Reduce}) {
    EXPECT_EQ(selectAlgorithm(input(c, 8, 4)).algo, Algo::Direct);
    EXPECT_EQ(selectAlgorithm(input(c, 8 << 20, 4)).algo, Algo::Ring);
    EXPECT_EQ(selectAlgorithm(input(c, 8, 4, 2)).algo, Algo::Ring);
    TuneInput gpu = input(c, 8, 4);
    gpu.gpu = true;
    EXPECT_EQ(selectAlgorithm(gpu).algo, Algo::Ring);
  }
}

// Ranks taking turns on the cores: LL's deeper FIFO saves hand-overs, so
// small collectives go LL (up to 8 KiB through the busiest rank); larger
// ones stay Simple.
TEST(Selector, RanksSharingCoresTakeLLForSmallCollectives) {
  for (CollType c : {CollType::AllReduce, CollType::AllGather, CollType::Broadcast, CollType::Reduce}) {
    TuneInput small = input(c, 2048, 4);
    small.cores = 2;
    EXPECT_EQ(selectAlgorithm(small).proto, Protocol::LL) << collTypeKey(c);
    TuneInput large = input(c, 1 << 20, 4);
    large.cores = 2;
    EXPECT_EQ(selectAlgorithm(large).proto, Protocol::Simple);
  }
}

// Medium host all-reduces of 3 to 8 ranks on one node take the two-shot
// (a ring's bytes in two exchanges); never with 2 ranks (it is the ring
// there), across nodes, for other collectives, or for the GPU operators
// whose kernels lack it.
TEST(Selector, MediumAllReducesOfThreeToEightRanksTakeTwoShot) {
  for (int nranks : {3, 4, 8}) {
    TuneInput in = input(CollType::AllReduce, 128 << 10, nranks);
    in.cores = 2;  // the CI machine
    EXPECT_EQ(selectAlgorithm(in).algo, Algo::TwoShot) << nranks;
    in.bytes = 8 << 20;
    EXPECT_EQ(selectAlgorithm(in).algo, Algo::Ring) << nranks;
    in.bytes = 8;
    EXPECT_EQ(selectAlgorithm(in).algo, Algo::Direct) << nranks;
  }
  // GPUs: only when NCCL_ALGO asks (docs/gpu.md), on the point-to-point channels.
  TuneInput gpu = input(CollType::AllReduce, 1 << 20, 4);
  gpu.gpu = true;
  gpu.maxChannels = kMaxChannels;
  EXPECT_NE(selectAlgorithm(gpu).algo, Algo::TwoShot);

  EnvGuard g("NCCL_ALGO", "TwoShot");
  EXPECT_EQ(selectAlgorithm(gpu).algo, Algo::TwoShot);
  EXPECT_LE(selectAlgorithm(gpu).nChannels, kGpuPeerChannels);
  gpu.fewAlgos = true;
  EXPECT_EQ(selectAlgorithm(gpu).algo, Algo::Ring);
  EXPECT_EQ(selectAlgorithm(input(CollType::AllReduce, 8, 3)).algo, Algo::TwoShot);
  for (const TuneInput& in :
       {input(CollType::AllReduce, 32 << 10, 2), input(CollType::AllReduce, 32 << 10, 4, 2),
        input(CollType::AllGather, 32 << 10, 4), input(CollType::AllReduce, 32 << 10, 16)}) {
    const TuneChoice c = selectAlgorithm(in);
    EXPECT_NE(c.algo, Algo::TwoShot) << in.nranks << " ranks, " << in.nnodes << " nodes";
    EXPECT_NE(c.note.find("NCCL_ALGO='TwoShot'"), std::string::npos);
  }
}

// Across nodes a channel is a connection of its own: mid sizes spread over
// more of them than within a node (measured on 16 cores: 1 MB over 4
// channels 1.6x Open MPI's busbw, over 2 channels 1.1-1.3x).
TEST(Selector, MidSizesAcrossNodesTakeMoreChannels) {
  const TuneChoice oneNode = selectAlgorithm(input(CollType::AllReduce, 1 << 20, 2, 1, 15));
  const TuneChoice twoNodes = selectAlgorithm(input(CollType::AllReduce, 1 << 20, 2, 2, 15));
  EXPECT_EQ(twoNodes.algo, Algo::Ring);
  EXPECT_EQ(oneNode.nChannels, 2);
  EXPECT_EQ(twoNodes.nChannels, 4);
  EXPECT_EQ(selectAlgorithm(input(CollType::AllReduce, 256 << 10, 2, 2, 15)).nChannels, 1);
  EXPECT_EQ(selectAlgorithm(input(CollType::AllReduce, 1 << 20, 2, 2, 1)).nChannels, 1);  // 2 cores
}

// Host all-reduces on windows run zero-copy from a few KiB up to
// BRAID_ZERO_COPY_MAX_BYTES, GPU ones only up to
// BRAID_GPU_ZERO_COPY_MAX_BYTES (default 0); without windows or where
// NCCL_ALGO rules Direct out, never.
TEST(Selector, WindowsMakeMidSizesZeroCopy) {
  TuneInput in = input(CollType::AllReduce, 512 << 10, 2);
  in.windows = true;
  TuneChoice c = selectAlgorithm(in);
  EXPECT_TRUE(c.zeroCopy);
  EXPECT_EQ(c.algo, Algo::Direct);
  EXPECT_EQ(c.proto, Protocol::Simple);
  EXPECT_LT(c.estimatedUs, selectAlgorithm(input(CollType::AllReduce, 512 << 10, 2)).estimatedUs);
  in.bytes = 64u << 20;  // past the caches: the ring
  EXPECT_FALSE(selectAlgorithm(in).zeroCopy);
  in.bytes = 512 << 10;
  {
    EnvGuard limit("BRAID_ZERO_COPY_MAX_BYTES", "0");
    EXPECT_FALSE(selectAlgorithm(in).zeroCopy);
  }
  {
    EnvGuard ring("NCCL_ALGO", "Ring");
    EXPECT_FALSE(selectAlgorithm(in).zeroCopy);
  }
  EXPECT_FALSE(selectAlgorithm(input(CollType::AllReduce, 512 << 10, 2)).zeroCopy);
  in.gpu = true;
  EXPECT_FALSE(selectAlgorithm(in).zeroCopy);  // GPUs: only when asked for (tuning.cc)
  EnvGuard gpu("BRAID_GPU_ZERO_COPY_MAX_BYTES", "1M");
  in.maxChannels = 32;
  c = selectAlgorithm(in);
  EXPECT_TRUE(c.zeroCopy);
  EXPECT_GT(c.nChannels, 4);  // as many as the size asks, not the peer channels' few
  in.bytes = 2u << 20;
  EXPECT_FALSE(selectAlgorithm(in).zeroCopy);
  in.bytes = 512 << 10;
  in.windows = false;
  EXPECT_FALSE(selectAlgorithm(in).zeroCopy);
}

// The topology's expected bus bandwidth caps the engine's rate per algorithm.
TEST(Selector, ReadsTheTopologysExpectedBandwidth) {
  TuneInput in = input(CollType::AllReduce, 256 << 20, 16, 2, 8);
  in.localRanks = 8;
  in.gpu = true;
  in.maxChannels = kMaxChannels;
  const TuneChoice free = selectAlgorithm(in);
  EXPECT_EQ(free.algo, Algo::Ring);
  // Links slower than the engine (PCIe, 20 GB/s): estimated by the links.
  in.ringBusGBs = in.treeBusGBs = 20;
  const TuneChoice pcie = selectAlgorithm(in);
  EXPECT_EQ(pcie.algo, Algo::Ring);
  const double ringBytes = 2.0 * 15 / 16 * (256 << 20);
  EXPECT_GT(pcie.estimatedUs, ringBytes / (20 * 1000.0));
  EXPECT_GT(pcie.estimatedUs, 2 * free.estimatedUs);
  // A topology that expects far more of its trees than of its rings makes
  // the tree the better all-reduce (the tree moves twice the ring's bytes).
  in.ringBusGBs = 5;
  in.treeBusGBs = 50;
  EXPECT_EQ(selectAlgorithm(in).algo, Algo::Tree);
  // A cached choice is not reused when only the figures changed.
  ChoiceCache cache;
  in.ringBusGBs = in.treeBusGBs = 0;
  EXPECT_EQ(cache.select(in).algo, Algo::Ring);
  in.ringBusGBs = 5;
  in.treeBusGBs = 50;
  EXPECT_EQ(cache.select(in).algo, Algo::Tree);
}

// Two GPUs (2x H200 over NVLink): one-shot for small all-reduces, the ring
// (on twice the channels the one-shot's point-to-point connectors have)
// for large ones; with 2 ranks both move the same bytes.
TEST(Selector, TwoGpusTakeTheRingForLargeAllReduces) {
  TuneInput in = input(CollType::AllReduce, 8, 2);
  in.gpu = true;
  in.maxChannels = kMaxChannels;
  in.ringBusGBs = in.treeBusGBs = 370.8;
  EXPECT_EQ(selectAlgorithm(in).algo, Algo::Direct);
  in.bytes = 256 << 10;
  EXPECT_EQ(selectAlgorithm(in).algo, Algo::Direct);
  in.bytes = 256 << 20;
  const TuneChoice large = selectAlgorithm(in);
  EXPECT_EQ(large.algo, Algo::Ring);
  EXPECT_EQ(large.nChannels, kMaxChannels);
  EXPECT_GT(large.nChannels, kGpuPeerChannels);
  {
    EnvGuard g("NCCL_ALGO", "Direct");
    EXPECT_LE(selectAlgorithm(in).nChannels, kGpuPeerChannels);
  }
}

// Operators other than sum have Ring, and Direct for 2 ranks, in the GPU
// kernel table: the selector never gives them anything else, forced or not.
TEST(Selector, GpuOperatorsOtherThanSumGetRingOrTwoRankDirect) {
  for (int nranks : {2, 4, 8}) {
    for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{256} << 20}) {
      TuneInput in = input(CollType::AllReduce, bytes, nranks);
      in.gpu = true;
      in.fewAlgos = true;
      in.maxChannels = kMaxChannels;
      const TuneChoice c = selectAlgorithm(in);
      EXPECT_TRUE(c.algo == Algo::Ring || (c.algo == Algo::Direct && nranks == 2))
          << nranks << " ranks, " << bytes << " B: " << algoName(c.algo);
      EnvGuard g("NCCL_ALGO", "Tree");
      const TuneChoice forced = selectAlgorithm(in);
      EXPECT_TRUE(forced.algo == Algo::Ring || (forced.algo == Algo::Direct && nranks == 2));
      EXPECT_NE(forced.note.find("NCCL_ALGO='Tree'"), std::string::npos);
    }
  }
  TuneInput sum = input(CollType::AllReduce, 8, 8);  // sum: the one-shot of 8 ranks is there
  sum.gpu = true;
  sum.maxChannels = kMaxChannels;
  EXPECT_EQ(selectAlgorithm(sum).algo, Algo::Direct);
}

// LL128 is a GPU ring protocol, only where the communicator allows it.
TEST(Selector, LL128OnlyOnGpuRingsThatAllowIt) {
  TuneInput in = input(CollType::AllReduce, 1 << 20, 2);
  in.gpu = true;
  in.maxChannels = kMaxChannels;
  {
    EnvGuard g("NCCL_PROTO", "LL128");
    in.ll128 = false;
    TuneChoice off = selectAlgorithm(in);
    EXPECT_NE(off.proto, Protocol::LL128);
    EXPECT_FALSE(off.note.empty());
    in.ll128 = true;
    TuneChoice on = selectAlgorithm(in);
    EXPECT_EQ(on.proto, Protocol::LL128);
    EXPECT_EQ(on.algo, Algo::Ring);
    EXPECT_TRUE(on.note.empty());
  }
  {
    EnvGuard a("NCCL_ALGO", "Tree");
    EnvGuard p("NCCL_PROTO", "LL128");  // Tree has no LL128: nothing allowed runs, the selector's choice does
    TuneChoice c = selectAlgorithm(in);
    EXPECT_FALSE(c.algo == Algo::Tree && c.proto == Protocol::LL128);
    EXPECT_FALSE(c.note.empty());
  }
  // Not measured over NVLink yet: without NCCL_PROTO the selector never picks it.
  for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 4) {
    in.bytes = bytes;
    EXPECT_NE(selectAlgorithm(in).proto, Protocol::LL128) << bytes;
  }
  TuneInput host = input(CollType::AllReduce, 1 << 20, 2);
  host.ll128 = true;  // ignored off the GPU
  EnvGuard g("NCCL_PROTO", "LL128");
  EXPECT_NE(selectAlgorithm(host).proto, Protocol::LL128);
}

TEST(Selector, HonoursTheEnvironment) {
  {
    EnvGuard g("NCCL_ALGO", "Tree");
    TuneChoice c = selectAlgorithm(input(CollType::AllReduce, 8, 4));
    EXPECT_EQ(c.algo, Algo::Tree);
    EXPECT_TRUE(c.note.empty());
    // Tree does not implement all-gather: the selector says so and runs its own choice.
    TuneChoice ag = selectAlgorithm(input(CollType::AllGather, 8, 4));
    EXPECT_NE(ag.algo, Algo::Tree);
    EXPECT_NE(ag.note.find("NCCL_ALGO"), std::string::npos);
  }
  {
    EnvGuard g("NCCL_PROTO", "LL");
    EXPECT_EQ(selectAlgorithm(input(CollType::AllReduce, 64 << 20, 2)).proto, Protocol::LL);
  }
  {
    EnvGuard g("NCCL_PROTO", "LL128");  // not on the host: falls back, with a note
    TuneChoice c = selectAlgorithm(input(CollType::AllReduce, 8, 2));
    EXPECT_NE(c.proto, Protocol::LL128);
    EXPECT_FALSE(c.note.empty());
  }
  {
    EnvGuard g("NCCL_MIN_NCHANNELS", "4");
    EXPECT_EQ(selectAlgorithm(input(CollType::AllGather, 1024, 2)).nChannels, 4);
  }
  {
    EnvGuard g("NCCL_MAX_NCHANNELS", "2");
    EXPECT_EQ(selectAlgorithm(input(CollType::AllReduce, 256 << 20, 2, 1, 16)).nChannels, 2);
  }
}

// Every rank's links, checked for consistency: parent/child pairs agree, one
// root, every rank reachable from it.
void checkTree(const std::vector<int>& nodeOf, int t) {
  const int n = static_cast<int>(nodeOf.size());
  std::vector<TreeLinks> links;
  for (int r = 0; r < n; ++r) links.push_back(buildDoubleTree(nodeOf, r)[static_cast<size_t>(t)]);
  int roots = 0, root = -1;
  for (int r = 0; r < n; ++r) {
    const TreeLinks& l = links[static_cast<size_t>(r)];
    ASSERT_LE(l.ndown, kMaxTreeChildren);
    if (l.up < 0) ++roots, root = r;
    for (int i = 0; i < l.ndown; ++i) EXPECT_EQ(links[static_cast<size_t>(l.down[i])].up, r);
    if (l.up >= 0) {
      const TreeLinks& p = links[static_cast<size_t>(l.up)];
      EXPECT_NE(std::find(p.down, p.down + p.ndown, r), p.down + p.ndown) << "rank " << r;
      // Across nodes only between heads (first rank of a node).
      if (nodeOf[static_cast<size_t>(l.up)] != nodeOf[static_cast<size_t>(r)]) {
        EXPECT_EQ(std::find(nodeOf.begin(), nodeOf.end(), nodeOf[static_cast<size_t>(r)]) - nodeOf.begin(),
                  r);
      }
    }
  }
  ASSERT_EQ(roots, 1);
  std::set<int> seen;
  std::function<void(int)> walk = [&](int r) {
    EXPECT_TRUE(seen.insert(r).second);
    const TreeLinks& l = links[static_cast<size_t>(r)];
    for (int i = 0; i < l.ndown; ++i) walk(l.down[i]);
  };
  walk(root);
  EXPECT_EQ(static_cast<int>(seen.size()), n);
}

TEST(DoubleTree, ValidTreesForManyLayouts) {
  for (int nodes : {1, 2, 3, 4, 5, 7, 8, 16, 33}) {
    for (int perNode : {1, 2, 4}) {
      std::vector<int> nodeOf;
      for (int node = 0; node < nodes; ++node) {
        for (int i = 0; i < perNode; ++i) nodeOf.push_back(node);
      }
      SCOPED_TRACE(testing::Message() << nodes << " nodes x " << perNode);
      checkTree(nodeOf, 0);
      checkTree(nodeOf, 1);
    }
  }
}

TEST(DoubleTree, OneNodeIsAChainAndTreesComplementAcrossNodes) {
  std::vector<int> oneNode(5, 0);
  for (int r = 0; r < 5; ++r) {
    TreeLinks l = buildDoubleTree(oneNode, r)[0];
    EXPECT_EQ(l.up, r - 1);
    EXPECT_EQ(l.ndown, r < 4 ? 1 : 0);
  }
  // 8 nodes x 1 rank: depth is logarithmic, and few nodes are leaves in both trees.
  std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int> parents = inOrderTreeParents(8);
  for (int p = 0; p < 8; ++p) {
    int depth = 0;
    for (int q = p; parents[static_cast<size_t>(q)] >= 0; q = parents[static_cast<size_t>(q)]) ++depth;
    EXPECT_LE(depth, 3);
  }
  int leafInBoth = 0;
  for (int r = 0; r < 8; ++r) {
    auto t = buildDoubleTree(eight, r);
    leafInBoth += (t[0].ndown == 0 && t[1].ndown == 0);
  }
  EXPECT_LE(leafInBoth, 1);
}

}  // namespace
}  // namespace braid
