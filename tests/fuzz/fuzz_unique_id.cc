// libFuzzer target: decodeUniqueId on any 128 bytes (input zero-padded or cut).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "bootstrap/wire.h"
#include "fuzz_util.h"

using namespace braid;
using namespace braid::bootstrap;
using braid::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // On the heap, exactly sizeof(ncclUniqueId) bytes: ASan sees any over-read.
  auto id = std::make_unique<ncclUniqueId>();
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, data, size < sizeof(id->internal) ? size : sizeof(id->internal));

  UniqueIdData d;
  Status s = decodeUniqueId(*id, &d);
  if (!s.ok()) {
    fuzz::checkRejected(s);
    return 0;
  }
  check(d.root.valid() && d.root.port() != 0);
  check((d.flags & ~kIdFlagRootOnRank0) == 0);

  auto again = std::make_unique<ncclUniqueId>();
  encodeUniqueId(d, again.get());
  UniqueIdData d2;
  check(decodeUniqueId(*again, &d2).ok());
  check(d2.flags == d.flags);
  check(fuzz::sameAddress(d2.root, d.root));
  check(d2.secret == d.secret);
  return 0;
}
