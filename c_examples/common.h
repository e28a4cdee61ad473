/*
 * Helpers shared by the C examples: status checks, tensor preparation from model
 * properties, synthetic NV12 frames and a monotonic clock.
 */
#ifndef VNPU_EXAMPLES_COMMON_H_
#define VNPU_EXAMPLES_COMMON_H_

#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnn/hb_dnn.h"
#include "dnn/hb_dnn_status.h"
#include "dnn/hb_sys.h"

/* Aborts the program with the code, its description and the last error detail. */
#define CHECK(call)                                                              \
  do {                                                                           \
    int32_t check_rc_ = (call);                                                  \
    if (check_rc_ != 0) {                                                        \
      fprintf(stderr, "%s:%d: %s -> %d (%s): %s\n", __FILE__, __LINE__, #call,   \
              (int)check_rc_, hbDNNGetErrorDesc(check_rc_),                      \
              vnpuGetLastErrorDetail());                                         \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* Bytes one tensor needs: H*W*3/2 for NV12, H*W + H*W/2 for NV12_SEPARATE planes
 * (plane 0 / plane 1), alignedByteSize otherwise. */
static inline uint32_t example_plane_size(const hbDNNTensorProperties *p, int plane) {
  if (p->tensorType == HB_DNN_IMG_TYPE_NV12 || p->tensorType == HB_DNN_IMG_TYPE_NV12_SEPARATE) {
    int nhwc = p->tensorLayout == HB_DNN_LAYOUT_NHWC;
    uint32_t h = (uint32_t)p->validShape.dimensionSize[nhwc ? 1 : 2];
    uint32_t w = (uint32_t)p->validShape.dimensionSize[nhwc ? 2 : 3];
    if (p->tensorType == HB_DNN_IMG_TYPE_NV12) return plane == 0 ? h * w * 3 / 2 : 0;
    return plane == 0 ? h * w : (plane == 1 ? h * w / 2 : 0);
  }
  return plane == 0 ? (uint32_t)p->alignedByteSize : 0;
}

/* Allocates memory for every output of `dnn` and copies the model's properties. */
static inline void example_prepare_outputs(hbDNNHandle_t dnn, hbDNNTensor *outputs, int32_t *n_out) {
  int32_t i;
  CHECK(hbDNNGetOutputCount(n_out, dnn));
  for (i = 0; i < *n_out; ++i) {
    memset(&outputs[i], 0, sizeof(outputs[i]));
    CHECK(hbDNNGetOutputTensorProperties(&outputs[i].properties, dnn, i));
    CHECK(hbSysAllocCachedMem(&outputs[i].sysMem[0],
                              (uint32_t)outputs[i].properties.alignedByteSize));
  }
}

/* Allocates memory for every input and output of `dnn` and copies the model's
 * properties into the tensors (the usual client pattern). */
static inline void example_prepare(hbDNNHandle_t dnn, hbDNNTensor *inputs, int32_t *n_in,
                                   hbDNNTensor *outputs, int32_t *n_out) {
  int32_t i;
  int plane;
  CHECK(hbDNNGetInputCount(n_in, dnn));
  for (i = 0; i < *n_in; ++i) {
    memset(&inputs[i], 0, sizeof(inputs[i]));
    CHECK(hbDNNGetInputTensorProperties(&inputs[i].properties, dnn, i));
    for (plane = 0; plane < 2; ++plane) {
      uint32_t size = example_plane_size(&inputs[i].properties, plane);
      if (size > 0) CHECK(hbSysAllocCachedMem(&inputs[i].sysMem[plane], size));
    }
  }
  example_prepare_outputs(dnn, outputs, n_out);
}

/* Frees what example_prepare allocated. */
static inline void example_free(hbDNNTensor *tensors, int32_t n) {
  int32_t i;
  int plane;
  for (i = 0; i < n; ++i)
    for (plane = 0; plane < 4; ++plane)
      if (tensors[i].sysMem[plane].virAddr != NULL) CHECK(hbSysFreeMem(&tensors[i].sysMem[plane]));
}

/* Fills an input with a deterministic pattern (a gradient for images). */
static inline void example_fill(hbDNNTensor *t, uint32_t seed) {
  int plane;
  for (plane = 0; plane < 2; ++plane) {
    uint8_t *p = (uint8_t *)t->sysMem[plane].virAddr;
    uint32_t k;
    if (p == NULL) continue;
    if (t->properties.tensorType == HB_DNN_TENSOR_TYPE_F32) {
      float *f = (float *)p;
      for (k = 0; k < t->sysMem[plane].memSize / 4; ++k) f[k] = (float)((k * 7 + seed) % 255) / 255.0f;
    } else {
      for (k = 0; k < t->sysMem[plane].memSize; ++k) p[k] = (uint8_t)((k * 3 + seed) & 0xff);
    }
    CHECK(hbSysFlushMem(&t->sysMem[plane], HB_SYS_MEM_CACHE_CLEAN));
  }
}

/* Monotonic time in microseconds. */
static inline double example_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Loads one model file and returns its first model. */
static inline void example_load(const char *path, hbPackedDNNHandle_t *packed, hbDNNHandle_t *dnn) {
  const char **names = NULL;
  int32_t count = 0;
  CHECK(hbDNNInitializeFromFiles(packed, &path, 1));
  CHECK(hbDNNGetModelNameList(&names, &count, *packed));
  if (count < 1) {
    fprintf(stderr, "%s holds no model\n", path);
    exit(1);
  }
  CHECK(hbDNNGetModelHandle(dnn, *packed, names[0]));
}

#endif /* VNPU_EXAMPLES_COMMON_H_ */
