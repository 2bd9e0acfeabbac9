// A small XML reader and writer for topology files (NCCL's and RCCL's
// NCCL_TOPO_FILE format). It reads elements, attributes, comments, the
// <?xml?> declaration and character data (ignored); it rejects anything else
// with an error naming the line. It never recurses deeper than kMaxXmlDepth
// nor accepts more than kMaxXmlElements, so a hostile file cannot exhaust the
// stack or memory. Pure functions; no global state; any thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "util/status.h"

namespace braid {

constexpr int kMaxXmlDepth = 64;
constexpr size_t kMaxXmlElements = 1 << 20;
constexpr size_t kMaxXmlBytes = 64u << 20;

struct XmlNode {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;  // in document order
  std::vector<std::unique_ptr<XmlNode>> children;
  int line = 0;  // where the element starts (1-based), 0 if built in memory

  // The attribute's value, or nullptr.
  const std::string* attr(const std::string& key) const;
  std::string attrOr(const std::string& key, const std::string& fallback) const;
  // Sets (replaces or appends) an attribute.
  void setAttr(const std::string& key, std::string value);
  XmlNode* addChild(std::string childName);
  // Deep copy.
  std::unique_ptr<XmlNode> clone() const;
};

// Parses one document with exactly one root element. `origin` names the
// source in errors ("topo.xml"): "topo.xml:12: unterminated attribute value".
Status parseXml(const std::string& text, const std::string& origin, std::unique_ptr<XmlNode>* root);
Status parseXmlFile(const std::string& path, std::unique_ptr<XmlNode>* root);

// Writes the tree, two spaces of indentation per level, attributes escaped.
std::string writeXml(const XmlNode& root);
Status writeXmlFile(const std::string& path, const XmlNode& root);

// Structural equality (names, attributes in order, children); lines ignored.
bool xmlEqual(const XmlNode& a, const XmlNode& b);

}  // namespace braid
