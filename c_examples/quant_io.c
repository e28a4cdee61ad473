/*
 * quant_io: quantised outputs and signed RGB inputs, read the way board YOLOv8 /
 * stereo applications read them.
 *
 * usage: quant_io prepare DIR            write the calibration samples (DIR/000.npy ...)
 *        quant_io F32.bin QUANT.bin      compare the quantised model with the float one
 *
 * F32.bin: the model compiled with an RGB NCHW u8 input and f32 outputs.
 * QUANT.bin: the same model compiled with `--input-data-type s8` (RGB bytes given as
 * pixel - 128) and S8/S16/S32 outputs (`--output-type`) calibrated on the samples of
 * `prepare`. The program checks the tensor properties a board app checks (RGB NCHW
 * input, S32/S16/S8 outputs with quantiType SCALE, per-channel scaleData along
 * quantizeAxis), feeds the same image to both models (u8 to the first, u8 - 128 as int8
 * to the second), dequantises every quantised output with scaleData[c] (and
 * zeroPointData[c] when present) and requires it to match the float output within one
 * quantisation step.
 */
#include "common.h"

#include <math.h>

#include "dnn/hb_dnn_ext.h"

#define N_SAMPLES 3

/* The synthetic RGB pixel (channel c, row y, column x) of sample `s`. */
static uint8_t pixel(int s, int c, int y, int x) {
  return (uint8_t)((x * (3 + c) + y * (5 + s) + 40 * c + 17 * s + ((x * y) % 7) * 9) & 0xff);
}

/* Writes a uint8 .npy of shape [1, 3, h, w] for sample `s`. */
static int write_npy(const char *path, int s, int h, int w) {
  char header[128];
  FILE *f = fopen(path, "wb");
  int n, c, y, x;
  if (f == NULL) return -1;
  n = snprintf(header, sizeof(header), "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3, %d, %d), }", h, w);
  while ((n + 11) % 64 != 0) header[n++] = ' ';
  header[n - 1] = '\n';
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc(n & 0xff, f);
  fputc(n >> 8, f);
  fwrite(header, 1, (size_t)n, f);
  for (c = 0; c < 3; ++c)
    for (y = 0; y < h; ++y)
      for (x = 0; x < w; ++x) fputc(pixel(s, c, y, x), f);
  return fclose(f);
}

static int prepare(const char *dir, int h, int w) {
  int s;
  char path[4096];
  for (s = 0; s < N_SAMPLES; ++s) {
    snprintf(path, sizeof(path), "%s/%03d.npy", dir, s);
    if (write_npy(path, s, h, w) != 0) {
      fprintf(stderr, "cannot write %s\n", path);
      return 1;
    }
  }
  printf("wrote %d calibration samples of 1x3x%dx%d to %s\n", N_SAMPLES, h, w, dir);
  return 0;
}

/* Runs one inference and waits for it. */
static void infer(hbDNNHandle_t dnn, hbDNNTensor *inputs, hbDNNTensor *outputs, int32_t n_out) {
  hbDNNTaskHandle_t task = NULL;
  hbDNNInferCtrlParam ctrl;
  int32_t i;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  CHECK(hbDNNInfer(&task, &outputs, inputs, dnn, &ctrl));
  CHECK(hbDNNWaitTaskDone(task, 0));
  CHECK(hbDNNReleaseTask(task));
  for (i = 0; i < n_out; ++i) CHECK(hbSysFlushMem(&outputs[i].sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE));
}

/* Element k of a quantised output as an integer. */
static double q_at(const hbDNNTensor *t, int64_t k) {
  const void *p = t->sysMem[0].virAddr;
  switch (t->properties.tensorType) {
    case HB_DNN_TENSOR_TYPE_S8: return ((const int8_t *)p)[k];
    case HB_DNN_TENSOR_TYPE_S16: return ((const int16_t *)p)[k];
    default: return ((const int32_t *)p)[k];
  }
}

/* Checks a quantised output against the float one; returns the number of failures. */
static int compare(const char *name, const hbDNNTensor *q, const hbDNNTensor *f) {
  const hbDNNTensorProperties *p = &q->properties;
  const float *ref = (const float *)f->sysMem[0].virAddr;
  int32_t axis = p->quantizeAxis, d;
  int64_t n = 1, inner = 1, k;
  int32_t channels;
  double worst = 0.0;
  int bad = 0;
  if (p->quantiType != SCALE || p->scale.scaleData == NULL || axis < 0 ||
      axis >= p->validShape.numDimensions) {
    fprintf(stderr, "%s: not a SCALE-quantised tensor (quantiType %d, axis %d)\n", name,
            (int)p->quantiType, (int)axis);
    return 1;
  }
  channels = p->validShape.dimensionSize[axis];
  if (p->scale.scaleLen != channels) {
    fprintf(stderr, "%s: scaleLen %d for %d channels\n", name, (int)p->scale.scaleLen, (int)channels);
    return 1;
  }
  for (d = 0; d < p->validShape.numDimensions; ++d) n *= p->validShape.dimensionSize[d];
  {
    int32_t es = p->tensorType == HB_DNN_TENSOR_TYPE_S8 ? 1 : p->tensorType == HB_DNN_TENSOR_TYPE_S16 ? 2 : 4;
    int32_t last = p->validShape.numDimensions - 1;
    if (p->stride[last] != es || (int64_t)p->alignedByteSize != n * es) {
      fprintf(stderr, "%s: stride %d / alignedByteSize %d do not fit %d-byte elements\n", name,
              (int)p->stride[last], (int)p->alignedByteSize, (int)es);
      return 1;
    }
  }
  for (d = axis + 1; d < p->validShape.numDimensions; ++d) inner *= p->validShape.dimensionSize[d];
  for (k = 0; k < n; ++k) {
    int32_t c = (int32_t)((k / inner) % channels);
    double zp = p->scale.zeroPointLen > 0 ? p->scale.zeroPointData[c] : 0.0;
    double scale = p->scale.scaleData[c];
    double real = (q_at(q, k) - zp) * scale;
    double err = fabs(real - (double)ref[k]) / scale;
    if (err > worst) worst = err;
    if (err > 1.0 + 1e-6 * fabs(ref[k]) / scale) {
      if (bad < 5)
        fprintf(stderr, "%s[%lld] (channel %d): %.9g dequantised vs %.9g float (%.3f steps)\n", name,
                (long long)k, (int)c, real, (double)ref[k], err);
      ++bad;
    }
  }
  printf("%-8s %s axis %d, %d scales (scale[0] %.4g): worst error %.3f steps over %lld values\n", name,
         p->tensorType == HB_DNN_TENSOR_TYPE_S8 ? "S8 " : p->tensorType == HB_DNN_TENSOR_TYPE_S16 ? "S16" : "S32",
         (int)axis, (int)p->scale.scaleLen, (double)p->scale.scaleData[0], worst, (long long)n);
  return bad;
}

int main(int argc, char **argv) {
  hbPackedDNNHandle_t packed_f = NULL, packed_q = NULL;
  hbDNNHandle_t dnn_f = NULL, dnn_q = NULL;
  hbDNNTensor in_f[1], in_q[1], out_f[8], out_q[8];
  int32_t n_in = 0, n_out_f = 0, n_out_q = 0, i, quantised = 0;
  int c, y, x, h, w, failures = 0;
  uint8_t *rgb;
  int8_t *srgb;

  if (argc == 3 && strcmp(argv[1], "prepare") == 0) return prepare(argv[2], 128, 128);
  if (argc != 3) {
    fprintf(stderr, "usage: quant_io prepare DIR | quant_io F32.bin QUANT.bin\n");
    return 2;
  }
  example_load(argv[1], &packed_f, &dnn_f);
  example_load(argv[2], &packed_q, &dnn_q);
  example_prepare(dnn_f, in_f, &n_in, out_f, &n_out_f);
  example_prepare(dnn_q, in_q, &n_in, out_q, &n_out_q);
  if (n_in != 1 || n_out_f != n_out_q) {
    fprintf(stderr, "the two models do not match (%d inputs, %d vs %d outputs)\n", (int)n_in,
            (int)n_out_f, (int)n_out_q);
    return 1;
  }

  /* What a YOLOv8 board app checks before feeding its int8 RGB input. */
  if (in_q[0].properties.tensorType != HB_DNN_IMG_TYPE_RGB ||
      in_q[0].properties.tensorLayout != HB_DNN_LAYOUT_NCHW) {
    fprintf(stderr, "input is type %d layout %d, not RGB NCHW\n", (int)in_q[0].properties.tensorType,
            (int)in_q[0].properties.tensorLayout);
    return 1;
  }
  h = in_q[0].properties.validShape.dimensionSize[2];
  w = in_q[0].properties.validShape.dimensionSize[3];
  rgb = (uint8_t *)in_f[0].sysMem[0].virAddr;
  srgb = (int8_t *)in_q[0].sysMem[0].virAddr;
  for (c = 0; c < 3; ++c)
    for (y = 0; y < h; ++y)
      for (x = 0; x < w; ++x) {
        uint8_t v = pixel(0, c, y, x);
        rgb[(c * h + y) * w + x] = v;
        srgb[(c * h + y) * w + x] = (int8_t)((int)v - 128);
      }
  CHECK(hbSysFlushMem(&in_f[0].sysMem[0], HB_SYS_MEM_CACHE_CLEAN));
  CHECK(hbSysFlushMem(&in_q[0].sysMem[0], HB_SYS_MEM_CACHE_CLEAN));

  infer(dnn_f, in_f, out_f, n_out_f);
  infer(dnn_q, in_q, out_q, n_out_q);

  for (i = 0; i < n_out_q; ++i) {
    const char *name = NULL;
    const hbDNNTensorProperties *p = &out_q[i].properties;
    CHECK(hbDNNGetOutputName(&name, dnn_q, i));
    if (p->tensorType == HB_DNN_TENSOR_TYPE_F32) {
      printf("%-8s F32 (quantiType %d)\n", name, (int)p->quantiType);
      continue;
    }
    if (p->tensorType != HB_DNN_TENSOR_TYPE_S8 && p->tensorType != HB_DNN_TENSOR_TYPE_S16 &&
        p->tensorType != HB_DNN_TENSOR_TYPE_S32) {
      fprintf(stderr, "%s: unexpected tensorType %d\n", name, (int)p->tensorType);
      ++failures;
      continue;
    }
    ++quantised;
    failures += compare(name, &out_q[i], &out_f[i]);
  }
  /* The scale pointers stay valid while the model is loaded: read them again. */
  for (i = 0; i < n_out_q; ++i) {
    hbDNNTensorProperties again;
    CHECK(hbDNNGetOutputTensorProperties(&again, dnn_q, i));
    if (again.scale.scaleData != out_q[i].properties.scale.scaleData) {
      fprintf(stderr, "output %d: scaleData moved\n", (int)i);
      ++failures;
    }
  }

  example_free(in_f, 1);
  example_free(in_q, 1);
  example_free(out_f, n_out_f);
  example_free(out_q, n_out_q);
  CHECK(hbDNNRelease(packed_f));
  CHECK(hbDNNRelease(packed_q));
  if (quantised == 0) {
    fprintf(stderr, "no quantised output in %s\n", argv[2]);
    return 1;
  }
  if (failures > 0) {
    fprintf(stderr, "%d value(s) off by more than one quantisation step\n", failures);
    return 1;
  }
  printf("all %d quantised outputs within one quantisation step of the float model\n", (int)quantised);
  return 0;
}
