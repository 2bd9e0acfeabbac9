// The reduce-copy kernel on a real GPU, against a host reference: every type
// and op of the kernel table, aligned and unaligned buffers, odd counts.
// Skips cleanly where no GPU is visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "exec/device/reduce_copy.h"
#include "platform/gpu.h"
#include "platform/gpu_runtime.h"

namespace braid {
namespace {

bool haveGpu() {
  int n = 0;
  return gpuDeviceCount(&n).ok() && n > 0;
}

template <typename T>
T reference(ncclRedOp_t op, T a, T b) {
  switch (op) {
    case ncclSum: return static_cast<T>(a + b);
    case ncclProd: return static_cast<T>(a * b);
    case ncclMin: return b < a ? b : a;
    default: return a < b ? b : a;
  }
}

template <typename T>
void checkType(ncclDataType_t type) {
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMin, ncclMax}) {
    if (!device::reduceCopyAvailable(type, op)) continue;
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1023), size_t(65537), size_t(1000003)}) {
      for (size_t offset : {size_t(0), size_t(1)}) {  // element offset 1 breaks 16-byte alignment
        SCOPED_TRACE(testing::Message() << "type " << type << " op " << op << " count " << count
                                        << " offset " << offset);
        std::vector<T> a(count + offset), b(count + offset), out(count + offset);
        for (size_t i = 0; i < count + offset; ++i) {
          a[i] = static_cast<T>((i * 7 + 3) % 13);
          b[i] = static_cast<T>((i * 5 + 1) % 11);
        }
        size_t bytes = (count + offset) * sizeof(T);
        void *da = nullptr, *db = nullptr, *dd = nullptr;
        ASSERT_TRUE(gpuMalloc(&da, bytes + 16).ok());
        ASSERT_TRUE(gpuMalloc(&db, bytes + 16).ok());
        ASSERT_TRUE(gpuMalloc(&dd, bytes + 16).ok());
        ASSERT_EQ(hipMemcpy(da, a.data(), bytes, hipMemcpyHostToDevice), hipSuccess);
        ASSERT_EQ(hipMemcpy(db, b.data(), bytes, hipMemcpyHostToDevice), hipSuccess);
        T* pd = static_cast<T*>(dd) + offset;
        const T* pa = static_cast<const T*>(da) + offset;
        const T* pb = static_cast<const T*>(db) + offset;
        Status s = device::launchReduceCopy(type, op, pd, pa, pb, count, nullptr);
        ASSERT_TRUE(s.ok()) << s.message();
        ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
        ASSERT_EQ(hipMemcpy(out.data(), dd, bytes, hipMemcpyDeviceToHost), hipSuccess);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[offset + i], reference<T>(op, a[offset + i], b[offset + i])) << "at " << i;
        }
        ASSERT_TRUE(gpuFree(da).ok());
        ASSERT_TRUE(gpuFree(db).ok());
        ASSERT_TRUE(gpuFree(dd).ok());
      }
    }
  }
}

TEST(GpuReduceCopy, AllTypesAndOps) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU visible";
  checkType<int8_t>(ncclInt8);
  checkType<uint8_t>(ncclUint8);
  checkType<int32_t>(ncclInt32);
  checkType<uint32_t>(ncclUint32);
  checkType<int64_t>(ncclInt64);
  checkType<uint64_t>(ncclUint64);
  checkType<float>(ncclFloat32);
  checkType<double>(ncclFloat64);
}

TEST(GpuReduceCopy, MissingKernelIsAnError) {
  Status s = device::launchReduceCopy(ncclBfloat16, ncclSum, nullptr, nullptr, nullptr, 1, nullptr);
  EXPECT_EQ(s.code(), ncclInvalidUsage);
}

}  // namespace
}  // namespace braid
