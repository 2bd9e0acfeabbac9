#include "topology/xml.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace braid {

const std::string* XmlNode::attr(const std::string& key) const {
  for (const auto& kv : attrs) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

std::string XmlNode::attrOr(const std::string& key, const std::string& fallback) const {
  const std::string* v = attr(key);
  return v ? *v : fallback;
}

void XmlNode::setAttr(const std::string& key, std::string value) {
  for (auto& kv : attrs) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  attrs.emplace_back(key, std::move(value));
}

XmlNode* XmlNode::addChild(std::string childName) {
  children.push_back(std::make_unique<XmlNode>());
  children.back()->name = std::move(childName);
  return children.back().get();
}

std::unique_ptr<XmlNode> XmlNode::clone() const {
  auto copy = std::make_unique<XmlNode>();
  copy->name = name;
  copy->attrs = attrs;
  copy->line = line;
  for (const auto& c : children) copy->children.push_back(c->clone());
  return copy;
}

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& origin) : s_(text), origin_(origin) {}

  Status document(std::unique_ptr<XmlNode>* root) {
    if (s_.size() > kMaxXmlBytes) return error("file larger than ", kMaxXmlBytes >> 20, " MiB");
    // A UTF-8 byte order mark is allowed.
    if (s_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;
    BRAID_CHECK(misc());
    if (pos_ >= s_.size()) return error("no root element");
    if (s_[pos_] != '<') return error("text outside the root element");
    BRAID_CHECK(element(root, 1));
    BRAID_CHECK(misc());
    if (pos_ < s_.size()) return error("content after the root element");
    return okStatus();
  }

 private:
  template <typename... Args>
  Status error(Args&&... args) const {
    return invalidArgument(origin_, ":", line_, ": ", std::forward<Args>(args)...);
  }

  bool startsWith(const char* lit) const { return s_.compare(pos_, std::strlen(lit), lit) == 0; }
  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < s_.size(); ++i, ++pos_) {
      if (s_[pos_] == '\n') ++line_;
    }
  }
  void skipSpace() {
    while (pos_ < s_.size() && std::strchr(" \t\r\n", s_[pos_]) != nullptr && s_[pos_] != '\0') advance(1);
  }
  static bool nameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
  }

  // Skips to just after `end`; error if it never comes.
  Status skipPast(const char* end, const char* what) {
    const int startLine = line_;
    size_t at = s_.find(end, pos_);
    if (at == std::string::npos) {
      line_ = startLine;
      return error("unterminated ", what);
    }
    advance(at + std::strlen(end) - pos_);
    return okStatus();
  }

  // Whitespace, comments, declarations and processing instructions.
  Status misc() {
    for (;;) {
      skipSpace();
      if (startsWith("<!--")) {
        BRAID_CHECK(skipPast("-->", "comment"));
      } else if (startsWith("<?")) {
        BRAID_CHECK(skipPast("?>", "processing instruction"));
      } else if (startsWith("<!DOCTYPE")) {
        return error("DOCTYPE is not supported");
      } else {
        return okStatus();
      }
    }
  }

  Status name(std::string* out) {
    size_t start = pos_;
    while (pos_ < s_.size() && nameChar(s_[pos_])) ++pos_;
    if (pos_ == start) {
      if (pos_ >= s_.size()) return error("unexpected end of file");
      return error("expected a name, found '", printable(s_[pos_]), "'");
    }
    out->assign(s_, start, pos_ - start);
    return okStatus();
  }

  static std::string printable(char c) {
    if (c >= 0x20 && c < 0x7f) return std::string(1, c);
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
    return buf;
  }

  Status unescape(const std::string& raw, std::string* out) {
    out->clear();
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '&') {
        *out += raw[i];
        continue;
      }
      size_t semi = raw.find(';', i);
      if (semi == std::string::npos || semi - i > 10) return error("bad entity in '", raw, "'");
      std::string ent = raw.substr(i + 1, semi - i - 1);
      if (ent == "lt")
        *out += '<';
      else if (ent == "gt")
        *out += '>';
      else if (ent == "amp")
        *out += '&';
      else if (ent == "quot")
        *out += '"';
      else if (ent == "apos")
        *out += '\'';
      else if (ent.size() > 1 && ent[0] == '#') {
        long code = ent[1] == 'x' ? std::strtol(ent.c_str() + 2, nullptr, 16)
                                  : std::strtol(ent.c_str() + 1, nullptr, 10);
        if (code <= 0 || code > 0x7f) return error("unsupported character reference &", ent, ";");
        *out += static_cast<char>(code);
      } else {
        return error("unknown entity &", ent, ";");
      }
      i = semi;
    }
    return okStatus();
  }

  Status element(std::unique_ptr<XmlNode>* out, int depth) {
    if (depth > kMaxXmlDepth) return error("elements nested deeper than ", kMaxXmlDepth);
    if (++elements_ > kMaxXmlElements) return error("more than ", kMaxXmlElements, " elements");
    auto node = std::make_unique<XmlNode>();
    node->line = line_;
    advance(1);  // '<'
    BRAID_CHECK(name(&node->name));
    for (;;) {
      const size_t before = pos_;
      skipSpace();
      if (pos_ >= s_.size()) return error("unexpected end of file inside <", node->name, ">");
      if (startsWith("/>")) {
        advance(2);
        *out = std::move(node);
        return okStatus();
      }
      if (s_[pos_] == '>') {
        advance(1);
        break;
      }
      if (pos_ == before) return error("expected whitespace before an attribute in <", node->name, ">");
      std::string key;
      BRAID_CHECK(name(&key));
      skipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '=') return error("attribute '", key, "' has no value");
      advance(1);
      skipSpace();
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) {
        return error("value of attribute '", key, "' is not quoted");
      }
      const char quote = s_[pos_];
      const int startLine = line_;
      size_t end = s_.find(quote, pos_ + 1);
      if (end == std::string::npos) {
        line_ = startLine;
        return error("unterminated value of attribute '", key, "'");
      }
      std::string raw = s_.substr(pos_ + 1, end - pos_ - 1);
      if (raw.find('<') != std::string::npos) return error("'<' inside the value of attribute '", key, "'");
      if (node->attr(key) != nullptr) return error("attribute '", key, "' repeated in <", node->name, ">");
      std::string value;
      BRAID_CHECK(unescape(raw, &value));
      advance(end + 1 - pos_);
      node->attrs.emplace_back(std::move(key), std::move(value));
    }
    // Content: children, comments, text (ignored), then the end tag.
    for (;;) {
      while (pos_ < s_.size() && s_[pos_] != '<') advance(1);
      if (pos_ >= s_.size()) return error("<", node->name, "> (line ", node->line, ") is never closed");
      if (startsWith("<!--")) {
        BRAID_CHECK(skipPast("-->", "comment"));
      } else if (startsWith("<![CDATA[")) {
        BRAID_CHECK(skipPast("]]>", "CDATA section"));
      } else if (startsWith("<?")) {
        BRAID_CHECK(skipPast("?>", "processing instruction"));
      } else if (startsWith("</")) {
        advance(2);
        std::string closing;
        BRAID_CHECK(name(&closing));
        if (closing != node->name) {
          return error("</", closing, "> closes <", node->name, "> opened on line ", node->line);
        }
        skipSpace();
        if (pos_ >= s_.size() || s_[pos_] != '>') return error("expected '>' after </", closing);
        advance(1);
        *out = std::move(node);
        return okStatus();
      } else {
        std::unique_ptr<XmlNode> child;
        BRAID_CHECK(element(&child, depth + 1));
        node->children.push_back(std::move(child));
      }
    }
  }

  const std::string& s_;
  const std::string& origin_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t elements_ = 0;
};

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

void writeNode(const XmlNode& n, int depth, std::string* out) {
  out->append(static_cast<size_t>(depth) * 2, ' ');
  *out += '<';
  *out += n.name;
  for (const auto& kv : n.attrs) *out += strCat(" ", kv.first, "=\"", escape(kv.second), "\"");
  if (n.children.empty()) {
    *out += "/>\n";
    return;
  }
  *out += ">\n";
  for (const auto& c : n.children) writeNode(*c, depth + 1, out);
  out->append(static_cast<size_t>(depth) * 2, ' ');
  *out += strCat("</", n.name, ">\n");
}

}  // namespace

Status parseXml(const std::string& text, const std::string& origin, std::unique_ptr<XmlNode>* root) {
  Parser parser(text, origin);
  return parser.document(root);
}

Status parseXmlFile(const std::string& path, std::unique_ptr<XmlNode>* root) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalidArgument("cannot open topology file ", path, ": ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  return parseXml(buf.str(), path, root);
}

std::string writeXml(const XmlNode& root) {
  std::string out;
  writeNode(root, 0, &out);
  return out;
}

Status writeXmlFile(const std::string& path, const XmlNode& root) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return systemError("cannot write topology file ", path, ": ", std::strerror(errno));
  out << writeXml(root);
  out.close();
  if (!out) return systemError("writing topology file ", path, " failed");
  return okStatus();
}

bool xmlEqual(const XmlNode& a, const XmlNode& b) {
  if (a.name != b.name || a.attrs != b.attrs || a.children.size() != b.children.size()) return false;
  for (size_t i = 0; i < a.children.size(); ++i) {
    if (!xmlEqual(*a.children[i], *b.children[i])) return false;
  }
  return true;
}

}  // namespace braid
