/*
 * dlopen_host: use vnpu as a plug-in backend. The program does not link the library:
 * it dlopen()s it, resolves the single symbol vnpuGetBackendV1 and calls everything
 * through the returned table (after checking its version and size).
 *
 * usage: dlopen_host LIBVNPU.so [MODEL.bin]
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "vnpu.h"

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

typedef const vnpuBackendV1 *(*get_backend_fn)(void);

static int run_model(const vnpuBackendV1 *b, const char *path) {
  hbPackedDNNHandle_t packed = NULL;
  hbDNNHandle_t dnn = NULL;
  const char **names = NULL;
  int32_t count = 0, n_in = 0, n_out = 0, i;
  hbDNNTensor in[8], out[8];
  hbDNNTensor *out_ptr = out;
  hbDNNTaskHandle_t task = NULL;
  hbDNNInferCtrlParam ctrl;

  EXPECT(b->hbDNNInitializeFromFiles(&packed, &path, 1) == 0);
  EXPECT(b->hbDNNGetModelNameList(&names, &count, packed) == 0 && count >= 1);
  EXPECT(b->hbDNNGetModelHandle(&dnn, packed, names[0]) == 0);
  EXPECT(b->hbDNNGetInputCount(&n_in, dnn) == 0 && n_in <= 8);
  EXPECT(b->hbDNNGetOutputCount(&n_out, dnn) == 0 && n_out <= 8);
  memset(in, 0, sizeof(in));
  memset(out, 0, sizeof(out));
  for (i = 0; i < n_in; ++i) {
    hbDNNTensorProperties *p = &in[i].properties;
    uint32_t size;
    EXPECT(b->hbDNNGetInputTensorProperties(p, dnn, i) == 0);
    size = (uint32_t)p->alignedByteSize;
    if (p->tensorType == HB_DNN_IMG_TYPE_NV12_SEPARATE) p->tensorType = HB_DNN_IMG_TYPE_NV12;
    if (p->tensorType == HB_DNN_IMG_TYPE_NV12) {
      int nhwc = p->tensorLayout == HB_DNN_LAYOUT_NHWC;
      size = (uint32_t)(p->validShape.dimensionSize[nhwc ? 1 : 2] * p->validShape.dimensionSize[nhwc ? 2 : 3] * 3 / 2);
    }
    EXPECT(b->hbSysAllocMem(&in[i].sysMem[0], size) == 0);
  }
  for (i = 0; i < n_out; ++i) {
    EXPECT(b->hbDNNGetOutputTensorProperties(&out[i].properties, dnn, i) == 0);
    EXPECT(b->hbSysAllocMem(&out[i].sysMem[0], (uint32_t)out[i].properties.alignedByteSize) == 0);
  }
  memset(&ctrl, 0, sizeof(ctrl));
  EXPECT(b->hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl) == 0);
  EXPECT(b->hbDNNWaitTaskDone(task, 0) == 0);
  EXPECT(b->hbDNNReleaseTask(task) == 0);
  for (i = 0; i < n_in; ++i) EXPECT(b->hbSysFreeMem(&in[i].sysMem[0]) == 0);
  for (i = 0; i < n_out; ++i) EXPECT(b->hbSysFreeMem(&out[i].sysMem[0]) == 0);
  /* Names are library-owned and die with the packed model: print before releasing. */
  printf("model %s ran through the table\n", names[0]);
  EXPECT(b->hbDNNRelease(packed) == 0);
  return 0;
}

int main(int argc, char **argv) {
  void *lib, *sym;
  get_backend_fn get;
  const vnpuBackendV1 *b;
  hbSysMem mem;
  const char *name = NULL;

  if (argc < 2) {
    fprintf(stderr, "usage: %s LIBVNPU.so [MODEL.bin]\n", argv[0]);
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  sym = dlsym(lib, "vnpuGetBackendV1");
  EXPECT(sym != NULL);
  /* POSIX guarantees that a dlsym result converts to a function pointer; memcpy keeps
   * ISO C's -pedantic quiet about the object-to-function pointer cast. */
  memcpy(&get, &sym, sizeof(get));
  b = get();
  EXPECT(b != NULL);
  EXPECT(b->abiVersion == VNPU_BACKEND_ABI_VERSION);
  EXPECT(b->structSize >= sizeof(vnpuBackendV1));
  printf("backend: vnpu %s, libdnn %s, ABI %u, table %u bytes\n", b->vnpuGetVersion(),
         b->hbDNNGetVersion(), (unsigned)b->abiVersion, (unsigned)b->structSize);

  EXPECT(b->hbDNNReleaseTask(NULL) == HB_DNN_INVALID_TASK_HANDLE);
  EXPECT(strlen(b->vnpuGetLastErrorDetail()) > 0);
  EXPECT(strlen(b->hbDNNGetErrorDesc(HB_DNN_TIMEOUT)) > 0);
  EXPECT(b->hbDNNGetLayoutName(&name, HB_DNN_LAYOUT_NCHW) == 0 && strcmp(name, "NCHW") == 0);
  EXPECT(b->hbSysAllocCachedMem(&mem, 4096) == 0);
  EXPECT(mem.virAddr != NULL && mem.memSize == 4096);
  EXPECT(b->hbSysFreeMem(&mem) == 0);
  EXPECT(b->hbSysFreeMem(&mem) == HB_SYS_INVALID_ARGUMENT);

  if (argc > 2 && run_model(b, argv[2]) != 0) return 1;
  dlclose(lib);
  printf("dlopen_host: ok\n");
  return 0;
}
