// cpp_api: the C API from C++11 — RAII owners for packed models, memory and tasks,
// errors turned into exceptions carrying vnpuGetLastErrorDetail().
//
// usage: cpp_api [MODEL.bin]
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dnn/hb_dnn.h"
#include "dnn/hb_dnn_ext.h"
#include "dnn/hb_dnn_status.h"
#include "dnn/hb_sys.h"
#include "dnn/plugin/hb_dnn_layer.h"
#include "dnn/plugin/hb_dnn_plugin.h"

namespace {

class DnnError : public std::runtime_error {
 public:
  DnnError(int32_t code, const std::string &what)
      : std::runtime_error(what + ": " + hbDNNGetErrorDesc(code) + " (" + vnpuGetLastErrorDetail() + ")"),
        code_(code) {}
  int32_t code() const { return code_; }

 private:
  int32_t code_;
};

void check(int32_t rc, const char *what) {
  if (rc != 0) throw DnnError(rc, what);
}

class Memory {
 public:
  explicit Memory(uint32_t size) : mem_() { check(hbSysAllocCachedMem(&mem_, size), "hbSysAllocCachedMem"); }
  ~Memory() {
    if (mem_.virAddr != nullptr) hbSysFreeMem(&mem_);
  }
  Memory(Memory &&o) noexcept : mem_(o.mem_) { o.mem_.virAddr = nullptr; }
  Memory(const Memory &) = delete;
  Memory &operator=(const Memory &) = delete;
  Memory &operator=(Memory &&) = delete;
  const hbSysMem &mem() const { return mem_; }

 private:
  hbSysMem mem_;
};

class Packed {
 public:
  explicit Packed(const std::string &path) : handle_(nullptr) {
    const char *p = path.c_str();
    check(hbDNNInitializeFromFiles(&handle_, &p, 1), "hbDNNInitializeFromFiles");
  }
  ~Packed() {
    if (handle_ != nullptr) hbDNNRelease(handle_);
  }
  Packed(const Packed &) = delete;
  Packed &operator=(const Packed &) = delete;
  std::vector<std::string> names() const {
    const char **list = nullptr;
    int32_t n = 0;
    check(hbDNNGetModelNameList(&list, &n, handle_), "hbDNNGetModelNameList");
    return std::vector<std::string>(list, list + n);
  }
  hbDNNHandle_t model(const std::string &name) const {
    hbDNNHandle_t h = nullptr;
    check(hbDNNGetModelHandle(&h, handle_, name.c_str()), "hbDNNGetModelHandle");
    return h;
  }

 private:
  hbPackedDNNHandle_t handle_;
};

class Task {
 public:
  Task() : handle_(nullptr) {}
  ~Task() {
    if (handle_ != nullptr) hbDNNReleaseTask(handle_);
  }
  Task(const Task &) = delete;
  Task &operator=(const Task &) = delete;
  hbDNNTaskHandle_t *slot() { return &handle_; }
  void wait(int32_t timeout_ms = 0) { check(hbDNNWaitTaskDone(handle_, timeout_ms), "hbDNNWaitTaskDone"); }

 private:
  hbDNNTaskHandle_t handle_;
};

uint32_t bytes_of(const hbDNNTensorProperties &p) {
  if (p.tensorType == HB_DNN_IMG_TYPE_NV12) {
    const bool nhwc = p.tensorLayout == HB_DNN_LAYOUT_NHWC;
    return static_cast<uint32_t>(p.validShape.dimensionSize[nhwc ? 1 : 2] *
                                 p.validShape.dimensionSize[nhwc ? 2 : 3] * 3 / 2);
  }
  return static_cast<uint32_t>(p.alignedByteSize);
}

void run_model(const std::string &path) {
  Packed packed(path);
  std::vector<std::string> names = packed.names();
  hbDNNHandle_t dnn = packed.model(names.at(0));
  int32_t n_in = 0, n_out = 0;
  check(hbDNNGetInputCount(&n_in, dnn), "hbDNNGetInputCount");
  check(hbDNNGetOutputCount(&n_out, dnn), "hbDNNGetOutputCount");
  std::vector<hbDNNTensor> in(static_cast<size_t>(n_in)), out(static_cast<size_t>(n_out));
  std::vector<Memory> memory;
  memory.reserve(static_cast<size_t>(n_in + n_out));
  for (int32_t i = 0; i < n_in; ++i) {
    hbDNNTensor &t = in[static_cast<size_t>(i)];
    std::memset(&t, 0, sizeof(t));
    check(hbDNNGetInputTensorProperties(&t.properties, dnn, i), "input properties");
    if (t.properties.tensorType == HB_DNN_IMG_TYPE_NV12_SEPARATE) t.properties.tensorType = HB_DNN_IMG_TYPE_NV12;
    memory.push_back(Memory(bytes_of(t.properties)));
    t.sysMem[0] = memory.back().mem();
    std::memset(t.sysMem[0].virAddr, 0x40, t.sysMem[0].memSize);
  }
  for (int32_t i = 0; i < n_out; ++i) {
    hbDNNTensor &t = out[static_cast<size_t>(i)];
    std::memset(&t, 0, sizeof(t));
    check(hbDNNGetOutputTensorProperties(&t.properties, dnn, i), "output properties");
    memory.push_back(Memory(static_cast<uint32_t>(t.properties.alignedByteSize)));
    t.sysMem[0] = memory.back().mem();
  }
  hbDNNInferCtrlParam ctrl;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  ctrl.priority = HB_DNN_PRIORITY_HIGHEST;
  Task task;
  hbDNNTensor *out_ptr = out.data();
  check(hbDNNInfer(task.slot(), &out_ptr, in.data(), dnn, &ctrl), "hbDNNInfer");
  task.wait();
  std::printf("model %s: %d inputs, %d outputs, inference ok\n", names[0].c_str(), n_in, n_out);
}

}  // namespace

int main(int argc, char **argv) {
  std::printf("libdnn %s, vnpu %s\n", hbDNNGetVersion(), vnpuGetVersion());
  try {
    Packed missing("/nonexistent/model.bin");
    std::fprintf(stderr, "loading a missing file succeeded\n");
    return 1;
  } catch (const DnnError &e) {
    if (e.code() != HB_DNN_CAN_NOT_OPEN_FILE) {
      std::fprintf(stderr, "unexpected: %s\n", e.what());
      return 1;
    }
    std::printf("expected failure: %s\n", e.what());
  }
  {
    Memory m(256);
    std::vector<char> bytes(256, 'x'), back(256, 0);
    hbSysMem mem = m.mem();
    check(hbSysWriteMem(&mem, bytes.data(), 256), "hbSysWriteMem");
    check(hbSysReadMem(back.data(), &mem, 256), "hbSysReadMem");
    if (bytes != back) {
      std::fprintf(stderr, "hbSysWriteMem/ReadMem round trip failed\n");
      return 1;
    }
  }
  if (argc > 1) {
    try {
      run_model(argv[1]);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  std::printf("cpp_api: ok\n");
  return 0;
}
