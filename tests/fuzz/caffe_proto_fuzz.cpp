// libFuzzer target for the protobuf wire decoder and Caffe's messages
// (framework/caffe/protobuf_wire.h, framework/caffe/caffe_proto.h). Any input
// must either parse or throw strata::IoError; crashes, sanitizer reports and
// other exception types are bugs. `bash tools/run_tests.sh fuzz` builds it
// with clang (tests/fuzz/CMakeLists.txt) and runs it over the seeds; by hand:
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF
//   cmake --build build-fuzz --target strata_fuzz_caffe_proto
//   mkdir -p /tmp/cp_new && build-fuzz/strata_fuzz_caffe_proto -max_total_time=60 /tmp/cp_new tests/fuzz/corpus_caffe_proto
// Seeds (tests/fuzz/corpus_caffe_proto; tests/caffe_proto_test.cpp replays
// each one on every test run):
//   datum_raw          a 1x2x2 Datum with bytes and a label
//   datum_float        a Datum with float_data (unpacked fixed32 fields)
//   blob_legacy        a BlobProto with num/channels/height/width and packed data
//   blob_shape_double  a BlobProto with shape.dim and packed double_data
//   net_two_layers     a NetParameter with a V1 and a V2 layer carrying blobs
//   invalid_length     a length past the end
//   invalid_varint     an 11-byte varint
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "framework/caffe/caffe_proto.h"
#include "framework/error.h"
#include "framework/caffe/protobuf_wire.h"

// Keeps the compiler from dropping the reads below.
volatile unsigned g_fuzz_sink;

namespace {

// Every length-delimited field read again as a nested message, to a bounded depth.
unsigned walk(std::string_view bytes, int depth) {
  strata::protobuf::WireReader r(bytes, "fuzz");
  strata::protobuf::Field f;
  unsigned sum = 0;
  while (r.next(&f)) {
    sum += f.number + static_cast<unsigned>(f.value);
    if (f.type == strata::protobuf::WireType::kBytes) {
      for (char c : f.bytes) sum += static_cast<unsigned char>(c);
      if (depth < 4) {
        try {
          sum += walk(f.bytes, depth + 1);
        } catch (const strata::IoError&) {
        }
      }
    }
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  unsigned sum = 0;
  try {
    const strata::caffe::Datum d = strata::caffe::parse_datum(in, "fuzz");
    sum += static_cast<unsigned>(d.data.size() + d.float_data.size()) + static_cast<unsigned>(d.label);
  } catch (const strata::IoError&) {
  }
  try {
    const strata::caffe::BlobProto b = strata::caffe::parse_blob_proto(in, "fuzz");
    for (float v : b.data) sum += static_cast<unsigned>(v != 0.0f);
    sum += static_cast<unsigned>(b.shape.size());
  } catch (const strata::IoError&) {
  }
  try {
    sum += walk(in, 0);
  } catch (const strata::IoError&) {
  }
  g_fuzz_sink = sum;
  return 0;
}
