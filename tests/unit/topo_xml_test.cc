// The topology XML reader and writer, and the model built from it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "topology/model.h"
#include "topology/xml.h"

namespace braid {
namespace {

std::string fixture(const std::string& name) {
  return std::string(BRAID_TOPO_FIXTURES) + "/" + name;
}

Status parse(const std::string& text) {
  std::unique_ptr<XmlNode> root;
  return parseXml(text, "t.xml", &root);
}

TEST(TopoXml, ParsesElementsAttributesAndComments) {
  std::unique_ptr<XmlNode> root;
  ASSERT_TRUE(parseXml("<?xml version=\"1.0\"?>\n<!-- c -->\n<a x=\"1\" y='t&amp;&lt;'>\n  text <b/><!-- in "
                       "-->\n  <c z=\"3\"></c>\n</a>\n",
                       "t.xml", &root)
                  .ok());
  EXPECT_EQ(root->name, "a");
  ASSERT_EQ(root->attrs.size(), 2u);
  EXPECT_EQ(root->attrOr("y", ""), "t&<");
  ASSERT_EQ(root->children.size(), 2u);
  EXPECT_EQ(root->children[0]->name, "b");
  EXPECT_EQ(root->children[1]->attrOr("z", ""), "3");
  EXPECT_EQ(root->children[1]->line, 5);
}

TEST(TopoXml, MalformedInputNamesTheLine) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"<system>\n<cpu>\n</system>\n", "t.xml:3: </system> closes <cpu> opened on line 2"},
      {"<system>\n<cpu numaid=\"0>\n</cpu></system>", "t.xml:2: unterminated value of attribute 'numaid'"},
      {"<system>\n\n<cpu numaid=0/></system>", "t.xml:3: value of attribute 'numaid' is not quoted"},
      {"<system>\n<cpu>", "t.xml:2: <cpu> (line 2) is never closed"},
      {"", "t.xml:1: no root element"},
      {"<a/><b/>", "content after the root element"},
      {"<a x=\"1\" x=\"2\"/>", "attribute 'x' repeated"},
      {"<a x=\"&bogus;\"/>", "unknown entity &bogus;"},
      {"<a>\n<!-- never ends\n</a>", "t.xml:2: unterminated comment"},
      {"<!DOCTYPE a><a/>", "DOCTYPE is not supported"},
      {"<a\n\n b=\"1\"c=\"2\"/>", "t.xml:3: expected whitespace before an attribute"},
      {"<a><\x01/></a>", "expected a name, found '\\x01'"},
  };
  for (const Case& c : cases) {
    Status s = parse(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << "got: " << s.message();
  }
}

TEST(TopoXml, DeepNestingIsRefusedNotCrashed) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "<a>";
  Status s = parse(deep);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nested deeper than"), std::string::npos) << s.message();
}

TEST(TopoXml, TruncatedFixturesFailCleanly) {
  std::unique_ptr<XmlNode> full;
  ASSERT_TRUE(parseXmlFile(fixture("dgx_h100.xml"), &full).ok());
  const std::string text = writeXml(*full);
  // Every prefix either fails with a located message or (the whole text) parses.
  for (size_t n = 0; n < text.size(); n += 7) {
    std::unique_ptr<XmlNode> root;
    Status s = parseXml(text.substr(0, n), "cut.xml", &root);
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_EQ(s.message().rfind("cut.xml:", 0), 0u) << s.message();
  }
}

TEST(TopoXml, ModelErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"<system>\n<cpu>\n<pci class=\"0x060400\"/></cpu></system>", "line 3: <pci> without busid"},
      {"<system><cpu>\n<pci busid=\"0000:01:00.0\"><gpu dev=\"x\"/></pci></cpu></system>",
       "line 2: <gpu> dev=\"x\""},
      {"<system><cpu><pci busid=\"0000:01:00.0\"><gpu/></pci>\n<pci "
       "busid=\"0000:01:00.0\"><gpu/></pci></cpu></system>",
       "line 2: busid 0000:01:00.0 appears twice"},
      {"<system><cpu><pci busid=\"0000:01:00.0\"><gpu>\n<nvlink count=\"2\"/></gpu></pci></cpu></system>",
       "line 2: <nvlink> without target"},
      {"<topology/>", "expected <system>"},
  };
  for (const Case& c : cases) {
    std::unique_ptr<XmlNode> root;
    ASSERT_TRUE(parseXml(c.text, "t.xml", &root).ok()) << c.text;
    TopoSystem sys;
    Status s = topoFromXml(*root, &sys);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << "got: " << s.message();
  }
}

class TopoFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(TopoFixture, RoundTripKeepsTheDocumentAndTheGraph) {
  TopoSystem a;
  ASSERT_TRUE(topoLoadFile(fixture(GetParam()), &a).ok());
  const std::string dumped = writeXml(*a.xml);
  std::unique_ptr<XmlNode> again;
  ASSERT_TRUE(parseXml(dumped, "dump", &again).ok());
  EXPECT_TRUE(xmlEqual(*a.xml, *again));
  TopoSystem b;
  ASSERT_TRUE(topoFromXml(*again, &b).ok());
  EXPECT_EQ(describeSystem(a), describeSystem(b));
  EXPECT_EQ(writeXml(*b.xml), dumped);
  // Through a file as NCCL_TOPO_DUMP_FILE would write it.
  // One file per fixture and process: ctest runs the fixtures in parallel.
  const std::string path =
      ::testing::TempDir() + "/braid_topo_dump_" + std::to_string(getpid()) + "_" + GetParam() + ".xml";
  ASSERT_TRUE(writeXmlFile(path, *a.xml).ok());
  TopoSystem c;
  const bool loaded = topoLoadFile(path, &c).ok();
  std::remove(path.c_str());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(describeSystem(a), describeSystem(c));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TopoFixture,
                         ::testing::Values("h200_nv18_vm.xml", "dgx_h100.xml", "mi250_8gcd.xml", "mi300x.xml",
                                           "pcie_2socket.xml", "h200_lab_nccl_dump.xml",
                                           "mi100_xgmi_ring.xml", "flat_vm_4gpu.xml",
                                           "pcie_2socket_8gpu.xml"));

TEST(TopoModel, H200PairIsOneNvLinkBundleInAFlatVm) {
  TopoSystem sys;
  ASSERT_TRUE(topoLoadFile(fixture("h200_nv18_vm.xml"), &sys).ok());
  ASSERT_EQ(sys.nGpus(), 2);
  EXPECT_TRUE(sys.flat);
  EXPECT_EQ(sys.gpu(0).arch, "sm_90");
  const TopoPath& p = sys.gpuPath(0, 1);
  EXPECT_EQ(p.type, PathType::Nvl);
  EXPECT_EQ(p.nodes.size(), 2u);
  EXPECT_NEAR(p.bw, 18 * 20.6, 1e-9);
  ASSERT_EQ(sys.nets.size(), 1u);
  EXPECT_EQ(sys.paths[0][static_cast<size_t>(sys.nets[0])].type, PathType::Phb);
}

// NCCL 2.28.9's own dump of the lab machine: the NVLinks go to an NVSwitch
// the VM hides, the CPU has numaid -1, the NIC has no PCI element.
TEST(TopoModel, ReadsNcclsDumpOfTheLabMachine) {
  TopoSystem sys;
  Status s = topoLoadFile(fixture("h200_lab_nccl_dump.xml"), &sys);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(sys.nGpus(), 2);
  EXPECT_TRUE(sys.flat);
  ASSERT_GE(sys.nvswitch, 0);
  EXPECT_EQ(sys.gpu(1).busId, "0000:00:07.0");
  const TopoPath& p = sys.gpuPath(0, 1);
  EXPECT_EQ(p.type, PathType::Nvl);
  EXPECT_EQ(p.nodes.size(), 3u);
  EXPECT_NEAR(p.bw, 18 * 20.6, 1e-9);
  ASSERT_EQ(sys.nets.size(), 1u);
  EXPECT_NEAR(sys.nodes[static_cast<size_t>(sys.nets[0])].netGBs, 1.25, 1e-9);
}

TEST(TopoModel, DgxH100GoesThroughOneNvSwitchAndEachGpuHasItsNic) {
  TopoSystem sys;
  ASSERT_TRUE(topoLoadFile(fixture("dgx_h100.xml"), &sys).ok());
  ASSERT_EQ(sys.nGpus(), 8);
  ASSERT_GE(sys.nvswitch, 0);
  EXPECT_FALSE(sys.flat);
  for (int a = 0; a < 8; ++a) {
    EXPECT_NEAR(sys.linkBw(sys.gpus[static_cast<size_t>(a)], sys.nvswitch), 18 * 20.6, 1e-9);
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      EXPECT_EQ(sys.gpuPath(a, b).type, PathType::Nvl);
      EXPECT_EQ(sys.gpuPath(a, b).nodes.size(), 3u);  // GPU, NVSwitch, GPU
    }
    // The NIC on the GPU's own switch is nearest (PIX).
    const int nearest = sys.netsByDistance(a)[0];
    EXPECT_EQ(nearest, a);
    EXPECT_EQ(
        sys.paths[static_cast<size_t>(a)][static_cast<size_t>(sys.nets[static_cast<size_t>(nearest)])].type,
        PathType::Pix);
  }
  EXPECT_EQ(sys.nodes[static_cast<size_t>(sys.nets[3])].netGBs, 50.0);
}

TEST(TopoModel, PcieClassesFollowTheTree) {
  TopoSystem sys;
  ASSERT_TRUE(topoLoadFile(fixture("pcie_2socket.xml"), &sys).ok());
  ASSERT_EQ(sys.nGpus(), 4);
  EXPECT_EQ(sys.gpuPath(2, 3).type, PathType::Pix);
  EXPECT_EQ(sys.gpuPath(0, 1).type, PathType::Phb);
  EXPECT_EQ(sys.gpuPath(0, 2).type, PathType::Sys);
  EXPECT_EQ(sys.gpuPath(1, 3).type, PathType::Sys);
  EXPECT_NEAR(sys.gpuPath(0, 2).bw, 10.0, 1e-9);  // the socket interconnect is the bottleneck
  EXPECT_NEAR(sys.gpuPath(2, 3).bw, 16 * 1.969, 1e-9);
}

TEST(TopoModel, Mi250LinksCarryTheirCounts) {
  TopoSystem sys;
  ASSERT_TRUE(topoLoadFile(fixture("mi250_8gcd.xml"), &sys).ok());
  ASSERT_EQ(sys.nGpus(), 8);
  EXPECT_EQ(sys.gpu(0).arch, "gfx90a");
  EXPECT_EQ(sys.gpuPath(0, 1).type, PathType::Xgmi);
  EXPECT_NEAR(sys.gpuPath(0, 1).bw, 4 * 50.0, 1e-9);
  EXPECT_NEAR(sys.gpuPath(0, 6).bw, 2 * 50.0, 1e-9);
  EXPECT_NEAR(sys.gpuPath(0, 2).bw, 50.0, 1e-9);
  // No direct link: PCIe through the package switches and the CPU.
  EXPECT_EQ(sys.gpuPath(0, 3).type, PathType::Phb);
}

}  // namespace
}  // namespace braid
