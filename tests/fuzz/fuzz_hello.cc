// libFuzzer target: helloSize on the fixed header, decodeHello on the whole input.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bootstrap/wire.h"
#include "fuzz_util.h"

using namespace braid;
using namespace braid::bootstrap;
using braid::fuzz::check;

namespace {

bool sameHello(const Hello& a, const Hello& b) {
  if (a.secret != b.secret || a.nranks != b.nranks || a.nIds != b.nIds || a.idIndex != b.idIndex) return false;
  if (!fuzz::sameAddress(a.firstRoot, b.firstRoot) || a.firstSecret != b.firstSecret) return false;
  if (a.ranks.size() != b.ranks.size()) return false;
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    if (a.ranks[i].rank != b.ranks[i].rank || !fuzz::sameAddress(a.ranks[i].address, b.ranks[i].address)) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The header alone, as the root reads it before the entries.
  bool sized = false;
  size_t total = 0;
  if (size >= kHelloFixedSize) {
    fuzz::HeapBytes head(data, kHelloFixedSize);
    Status s = helloSize(head.data(), head.size, &total);
    if (s.ok()) {
      sized = true;
      check(total >= kHelloFixedSize && (total - kHelloFixedSize) % (4 + kWireAddressSize) == 0);
    } else {
      fuzz::checkRejected(s);
    }
  }

  fuzz::HeapBytes whole(data, size);
  Hello h;
  Status s = decodeHello(whole.data(), whole.size, &h);
  if (!s.ok()) {
    fuzz::checkRejected(s);
    return 0;
  }
  // Accepted: the header announced exactly this many bytes.
  check(sized && total == size);
  check(h.nranks > 0 && h.nranks <= kMaxRanks && !h.ranks.empty() && h.ranks.size() <= h.nranks);
  check(h.nIds > 0 && h.nIds <= h.nranks && h.idIndex < h.nIds);
  check(h.idIndex == 0 || h.firstRoot.valid());
  for (const RankAddress& ra : h.ranks) check(ra.rank < h.nranks && ra.address.valid());

  std::vector<uint8_t> again = encodeHello(h);
  check(again.size() == size);
  size_t againTotal = 0;
  check(helloSize(again.data(), kHelloFixedSize, &againTotal).ok() && againTotal == size);
  Hello h2;
  check(decodeHello(again.data(), again.size(), &h2).ok());
  check(sameHello(h, h2));
  return 0;
}
