/*
 * bad_input: misuse of the C API, case by case; each case asserts the documented
 * status code (and that nothing crashes). Cases that need a loaded model run when a
 * model file is given.
 *
 * usage: bad_input SCRATCH_DIR [MODEL.bin]
 */
#include "common.h"

static int g_cases = 0, g_failures = 0;

#define EXPECT_CODE(call, code)                                                        \
  do {                                                                                 \
    int32_t got_ = (call);                                                             \
    ++g_cases;                                                                         \
    if (got_ != (code)) {                                                              \
      ++g_failures;                                                                    \
      fprintf(stderr, "FAIL %s:%d: %s -> %d, expected %s (%d); detail: %s\n", __FILE__, \
              __LINE__, #call, (int)got_, #code, (int)(code), vnpuGetLastErrorDetail()); \
    }                                                                                  \
  } while (0)

#define EXPECT_TRUE(cond)                                                   \
  do {                                                                      \
    ++g_cases;                                                              \
    if (!(cond)) {                                                          \
      ++g_failures;                                                         \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
    }                                                                       \
  } while (0)

static void done_cb(hbDNNTaskHandle_t task, int32_t status, void *userdata) {
  (void)task;
  (void)status;
  (void)userdata;
}

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, len, f) != len) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

static void model_free_cases(const char *scratch) {
  hbPackedDNNHandle_t packed = NULL;
  hbDNNHandle_t dnn = NULL;
  hbDNNTaskHandle_t task = NULL;
  hbDNNTensor tensors[2];
  hbDNNTensor *out_ptr = tensors;
  hbDNNInferCtrlParam ctrl;
  hbDNNTensorProperties props;
  hbSysMem mem, other;
  hbDNNTensorShape shape3, shape4;
  const char **names = NULL;
  const char *name = NULL;
  const char *null_name = NULL;
  const char *missing = "/nonexistent/dir/model.bin";
  char corrupt[512], empty[512], buf[64];
  static const char garbage[] = "this is not a model file, just some bytes of text";
  const void *blob = garbage;
  int32_t blob_len = (int32_t)sizeof(garbage), zero_len = 0, count = 0;
  const char *path;
  int local = 0;
  void *foreign = (void *)&local;
  void *junk = (void *)(uintptr_t)0x1234;

  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  memset(tensors, 0, sizeof(tensors));
  snprintf(corrupt, sizeof(corrupt), "%s/corrupt.bin", scratch);
  snprintf(empty, sizeof(empty), "%s/empty.bin", scratch);
  write_file(corrupt, garbage, sizeof(garbage));
  write_file(empty, "", 0);

  /* Loading. */
  path = missing;
  EXPECT_CODE(hbDNNInitializeFromFiles(NULL, &path, 1), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "packedDNNHandle") != NULL);
  EXPECT_CODE(hbDNNInitializeFromFiles(&packed, NULL, 1), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInitializeFromFiles(&packed, &path, 0), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInitializeFromFiles(&packed, &null_name, 1), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInitializeFromFiles(&packed, &path, 1), HB_DNN_CAN_NOT_OPEN_FILE);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "nonexistent") != NULL);
  path = corrupt;
  EXPECT_CODE(hbDNNInitializeFromFiles(&packed, &path, 1), HB_DNN_INVALID_MODEL);
  path = empty;
  EXPECT_CODE(hbDNNInitializeFromFiles(&packed, &path, 1), HB_DNN_INVALID_MODEL);
  EXPECT_CODE(hbDNNInitializeFromDDR(&packed, NULL, &blob_len, 1), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInitializeFromDDR(&packed, &blob, &zero_len, 1), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInitializeFromDDR(&packed, &blob, &blob_len, 1), HB_DNN_INVALID_MODEL);
  EXPECT_TRUE(packed == NULL); /* out-params untouched on failure */

  /* Packed and model handles. */
  EXPECT_CODE(hbDNNRelease(NULL), HB_DNN_INVALID_PACKED_DNN_HANDLE);
  EXPECT_CODE(hbDNNRelease(junk), HB_DNN_INVALID_PACKED_DNN_HANDLE);
  EXPECT_CODE(hbDNNRelease(foreign), HB_DNN_INVALID_PACKED_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetModelNameList(NULL, &count, junk), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNGetModelNameList(&names, &count, junk), HB_DNN_INVALID_PACKED_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetModelHandle(&dnn, NULL, "m"), HB_DNN_INVALID_PACKED_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetInputCount(&count, NULL), HB_DNN_INVALID_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetInputCount(NULL, junk), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNGetOutputCount(&count, foreign), HB_DNN_INVALID_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetInputName(&name, junk, 0), HB_DNN_INVALID_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetOutputTensorProperties(&props, junk, 0), HB_DNN_INVALID_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetEstimateLatency(&count, junk), HB_DNN_INVALID_DNN_HANDLE);

  /* Tasks. */
  EXPECT_CODE(hbDNNInfer(NULL, &out_ptr, tensors, junk, &ctrl), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, tensors, junk, NULL), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, tensors, junk, &ctrl), HB_DNN_INVALID_DNN_HANDLE);
  EXPECT_CODE(hbDNNRoiInfer(&task, &out_ptr, tensors, NULL, 1, junk, &ctrl), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(task == NULL);
  EXPECT_CODE(hbDNNWaitTaskDone(NULL, 0), HB_DNN_INVALID_TASK_HANDLE);
  EXPECT_CODE(hbDNNWaitTaskDone(junk, 10), HB_DNN_INVALID_TASK_HANDLE);
  EXPECT_CODE(hbDNNReleaseTask(NULL), HB_DNN_INVALID_TASK_HANDLE);
  EXPECT_CODE(hbDNNReleaseTask(foreign), HB_DNN_INVALID_TASK_HANDLE);
  EXPECT_CODE(hbDNNSetTaskDoneCb(junk, done_cb, NULL), HB_DNN_INVALID_TASK_HANDLE);
  EXPECT_CODE(hbDNNGetTaskEstimateTime(&count, junk), HB_DNN_INVALID_TASK_HANDLE);

  /* System memory. */
  EXPECT_CODE(hbSysAllocMem(NULL, 16), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysAllocMem(&mem, 0), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysAllocMem(&mem, 64), HB_SYS_SUCCESS);
  EXPECT_CODE(hbSysFlushMem(&mem, 3), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysFlushMem(NULL, HB_SYS_MEM_CACHE_CLEAN), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysWriteMem(&mem, buf, 65), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysWriteMem(&mem, NULL, 4), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysReadMem(NULL, &mem, 4), HB_SYS_INVALID_ARGUMENT);
  other = mem;
  EXPECT_CODE(hbSysRegisterMem(&other), HB_SYS_REGISTER_MEM_FAILED);
  EXPECT_CODE(hbSysUnregisterMem(&mem), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysFreeMem(&mem), HB_SYS_SUCCESS);
  EXPECT_CODE(hbSysFreeMem(&mem), HB_SYS_INVALID_ARGUMENT);
  other.virAddr = buf;
  other.memSize = sizeof(buf);
  EXPECT_CODE(hbSysFreeMem(&other), HB_SYS_INVALID_ARGUMENT);
  EXPECT_CODE(hbSysFreeMem(NULL), HB_SYS_INVALID_ARGUMENT);

  /* Extras. */
  EXPECT_CODE(hbDNNGetLayoutName(&name, 7), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNGetLayoutName(NULL, HB_DNN_LAYOUT_NHWC), HB_DNN_INVALID_ARGUMENT);
  memset(&shape3, 0, sizeof(shape3));
  shape3.numDimensions = 3;
  shape3.dimensionSize[0] = shape3.dimensionSize[1] = shape3.dimensionSize[2] = 2;
  memset(&shape4, 0, sizeof(shape4));
  shape4.numDimensions = 9;
  EXPECT_CODE(hbDNNConvertLayout(buf, HB_DNN_LAYOUT_NCHW, garbage, HB_DNN_LAYOUT_NHWC,
                                 HB_DNN_TENSOR_TYPE_U8, shape3, false),
              HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNAddPadding(buf, shape4, garbage, shape3, HB_DNN_TENSOR_TYPE_U8),
              HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(hbDNNGetErrorDesc(12345) != NULL && strlen(hbDNNGetErrorDesc(12345)) > 0);
  EXPECT_TRUE(strcmp(hbDNNGetErrorDesc(HB_DNN_SUCCESS), hbDNNGetErrorDesc(HB_DNN_TIMEOUT)) != 0);
}

static void model_cases(const char *path) {
  hbPackedDNNHandle_t packed = NULL;
  hbDNNHandle_t dnn = NULL;
  hbDNNTensor in[8], out[8], saved;
  hbDNNTensor *out_ptr = out, *null_out = NULL;
  hbDNNTaskHandle_t task = NULL;
  hbDNNInferCtrlParam ctrl;
  hbDNNRoi roi = {1, 0, 15, 15};
  int32_t n_in = 0, n_out = 0;
  const char *name = NULL;
  void *junk = (void *)(uintptr_t)0x30000000000005ull;

  example_load(path, &packed, &dnn);
  example_prepare(dnn, in, &n_in, out, &n_out);
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);

  EXPECT_CODE(hbDNNGetModelHandle(&dnn, packed, "no_such_model"), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNGetModelHandle(&dnn, packed, NULL), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNGetInputName(&name, dnn, -1), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNGetInputName(&name, dnn, n_in), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNGetOutputName(&name, dnn, n_out), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNInfer(&task, &null_out, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);

  saved = in[0];
  in[0].sysMem[0].memSize -= 1;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "memSize") != NULL);
  in[0] = saved;
  in[0].properties.tensorType = HB_DNN_TENSOR_TYPE_F64;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "tensorType") != NULL);
  in[0] = saved;
  in[0].properties.validShape.dimensionSize[0] += 1;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "validShape") != NULL);
  in[0] = saved;
  in[0].properties.tensorLayout = in[0].properties.tensorLayout == HB_DNN_LAYOUT_NCHW
                                      ? HB_DNN_LAYOUT_NHWC
                                      : HB_DNN_LAYOUT_NCHW;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  in[0] = saved;
  in[0].sysMem[0].virAddr = NULL;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  in[0] = saved;
  out[0].sysMem[0].memSize -= 1;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "output 0") != NULL);
  out[0].sysMem[0].memSize += 1;
  ctrl.priority = 300;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  ctrl.priority = 0;
  task = junk;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_INVALID_TASK_HANDLE);
  task = NULL;
  EXPECT_TRUE(task == NULL);

  /* dspCoreId is ignored: -1 is accepted. The runtime now runs, so a key that takes
   * effect at its start can no longer change. */
  ctrl.dspCoreId = -1;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_SUCCESS);
  EXPECT_CODE(hbDNNWaitTaskDone(task, 0), HB_DNN_SUCCESS);
  EXPECT_CODE(hbDNNReleaseTask(task), HB_DNN_SUCCESS);
  task = NULL;
  ctrl.dspCoreId = 0;
  EXPECT_CODE(vnpuSetConfig("VNPU_CORES", "3"), HB_DNN_API_USE_ERROR);

  /* ROI checks (before anything is submitted). */
  EXPECT_CODE(hbDNNRoiInfer(&task, &out_ptr, in, &roi, 0, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(hbDNNRoiInfer(&task, &out_ptr, in, &roi, 256, dnn, &ctrl),
              HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT);
  if (in[0].properties.tensorType == HB_DNN_IMG_TYPE_NV12) {
    EXPECT_CODE(hbDNNRoiInfer(&task, &out_ptr, in, &roi, 1, dnn, &ctrl), HB_DNN_INVALID_ARGUMENT);
    EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "even") != NULL);
  }

  /* A task assembled with more = 1 is not submitted: waiting is misuse; release works
   * once, then the handle is stale. */
  ctrl.more = 1;
  EXPECT_CODE(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl), HB_DNN_SUCCESS);
  EXPECT_TRUE(task != NULL);
  EXPECT_CODE(hbDNNWaitTaskDone(task, 1), HB_DNN_API_USE_ERROR);
  EXPECT_CODE(hbDNNReleaseTask(task), HB_DNN_SUCCESS);
  EXPECT_CODE(hbDNNReleaseTask(task), HB_DNN_INVALID_TASK_HANDLE);
  EXPECT_CODE(hbDNNWaitTaskDone(task, 0), HB_DNN_INVALID_TASK_HANDLE);

  /* Released packed model: its model handle is stale, a second release fails. */
  example_free(in, n_in);
  example_free(out, n_out);
  EXPECT_CODE(hbDNNRelease(packed), HB_DNN_SUCCESS);
  EXPECT_CODE(hbDNNRelease(packed), HB_DNN_INVALID_PACKED_DNN_HANDLE);
  EXPECT_CODE(hbDNNGetInputCount(&n_in, dnn), HB_DNN_INVALID_DNN_HANDLE);
}

/* Configuration calls: unknown keys, malformed and out-of-range values, small buffers. */
static void config_cases(void) {
  char value[64];
  char tiny[1];
  EXPECT_CODE(vnpuSetConfig(NULL, "1"), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(vnpuSetConfig("VNPU_NO_SUCH_KEY", "1"), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "unknown key") != NULL);
  EXPECT_CODE(vnpuSetConfig("VNPU_INTRA_OP_THREADS", "0"), HB_DNN_INVALID_ARGUMENT);
  EXPECT_TRUE(strstr(vnpuGetLastErrorDetail(), "1..=64") != NULL);
  EXPECT_CODE(vnpuSetConfig("VNPU_INTRA_OP_THREADS", "many"), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(vnpuSetConfig("VNPU_INTRA_OP_THREADS", "1"), HB_DNN_SUCCESS);
  EXPECT_CODE(vnpuGetConfig("VNPU_INTRA_OP_THREADS", value, (int32_t)sizeof value),
              HB_DNN_SUCCESS);
  EXPECT_TRUE(strcmp(value, "1") == 0);
  EXPECT_CODE(vnpuGetConfig("VNPU_INTRA_OP_THREADS", tiny, 1), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(vnpuGetConfig("VNPU_INTRA_OP_THREADS", NULL, 8), HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(vnpuGetConfig("VNPU_NO_SUCH_KEY", value, (int32_t)sizeof value),
              HB_DNN_INVALID_ARGUMENT);
  EXPECT_CODE(vnpuSetConfig("VNPU_INTRA_OP_THREADS", NULL), HB_DNN_SUCCESS);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR [MODEL.bin]\n", argv[0]);
    return 2;
  }
  config_cases();
  model_free_cases(argv[1]);
  if (argc > 2) model_cases(argv[2]);
  printf("bad_input: %d cases, %d failures\n", g_cases, g_failures);
  return g_failures == 0 ? 0 : 1;
}
