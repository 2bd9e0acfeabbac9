#include "util/sysfs.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "util/strings.h"

namespace braid {

std::string readSysfs(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream buf;
  buf << in.rdbuf();
  return trim(buf.str());
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string pciBusIdOf(const std::string& sysPath) {
  char real[PATH_MAX];
  if (realpath(sysPath.c_str(), real) == nullptr) return "";
  std::string found;
  for (const std::string& part : splitString(real, '/')) {
    if (part.size() == 12 && part[4] == ':' && part[7] == ':' && part[10] == '.') found = part;
  }
  return found;
}

int pciNumaNode(const std::string& busId) {
  const std::string text = busId.empty() ? "" : readSysfs("/sys/bus/pci/devices/" + busId + "/numa_node");
  return text.empty() ? -1 : std::atoi(text.c_str());
}

std::string gidText(const uint8_t raw[16]) {
  std::string s;
  for (int i = 0; i < 16; i += 2) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "%s%02x%02x", i ? ":" : "", raw[i], raw[i + 1]);
    s += buf;
  }
  return s;
}

}  // namespace braid
