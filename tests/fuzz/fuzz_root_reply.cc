// libFuzzer target: replyBodySize on the header, decodeRootReply on the whole input.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bootstrap/wire.h"
#include "fuzz_util.h"

using namespace braid;
using namespace braid::bootstrap;
using braid::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool sized = false;
  size_t body = 0;
  if (size >= kReplyHeaderSize) {
    fuzz::HeapBytes header(data, kReplyHeaderSize);
    Status s = replyBodySize(header.data(), header.size, &body);
    if (s.ok()) {
      sized = true;
      check(body <= kMaxMessage + static_cast<size_t>(kMaxRanks) * kWireAddressSize);
    } else {
      fuzz::checkRejected(s);
    }
  }

  fuzz::HeapBytes whole(data, size);
  RootReply reply;
  Status s = decodeRootReply(whole.data(), whole.size, &reply);
  if (!s.ok()) {
    fuzz::checkRejected(s);
    return 0;
  }
  check(sized && kReplyHeaderSize + body == size);
  check(static_cast<int>(reply.result) >= 0 && static_cast<int>(reply.result) < ncclNumResults);
  check(reply.message.size() <= kMaxMessage);
  for (const SocketAddress& a : reply.addresses) check(a.valid());

  std::vector<uint8_t> again = encodeRootReply(reply);
  check(again.size() == size);
  RootReply r2;
  check(decodeRootReply(again.data(), again.size(), &r2).ok());
  check(r2.result == reply.result && r2.message == reply.message);
  check(r2.addresses.size() == reply.addresses.size());
  for (size_t i = 0; i < reply.addresses.size(); ++i) check(fuzz::sameAddress(r2.addresses[i], reply.addresses[i]));
  return 0;
}
