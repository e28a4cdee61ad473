/*
 * classify: load a model, print its tensors, run one inference on a synthetic NV12
 * frame and print the top-5 scores of the first output.
 *
 * usage: classify MODEL.bin
 */
#include "common.h"

static const char *type_name(int32_t t) {
  switch (t) {
    case HB_DNN_IMG_TYPE_NV12: return "NV12";
    case HB_DNN_IMG_TYPE_NV12_SEPARATE: return "NV12_SEPARATE";
    case HB_DNN_TENSOR_TYPE_F32: return "F32";
    case HB_DNN_TENSOR_TYPE_S8: return "S8";
    case HB_DNN_TENSOR_TYPE_U8: return "U8";
    default: return "other";
  }
}

static void print_props(const char *kind, int32_t i, const char *name, const hbDNNTensorProperties *p) {
  int32_t d;
  const char *layout = "?";
  CHECK(hbDNNGetLayoutName(&layout, p->tensorLayout));
  printf("%s[%d] %s: type %s (%d), layout %s, shape [", kind, (int)i, name, type_name(p->tensorType),
         (int)p->tensorType, layout);
  for (d = 0; d < p->validShape.numDimensions; ++d)
    printf("%s%d", d ? ", " : "", (int)p->validShape.dimensionSize[d]);
  printf("], %d bytes, quanti %d\n", (int)p->alignedByteSize, (int)p->quantiType);
}

int main(int argc, char **argv) {
  hbPackedDNNHandle_t packed = NULL;
  hbDNNHandle_t dnn = NULL;
  hbDNNTensor inputs[8], outputs[8];
  hbDNNTensor *out_ptr = outputs;
  int32_t n_in = 0, n_out = 0, i, k;
  hbDNNTaskHandle_t task = NULL;
  hbDNNInferCtrlParam ctrl;
  const float *scores;
  int32_t n_scores;
  int best[5] = {-1, -1, -1, -1, -1};

  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.bin\n", argv[0]);
    return 2;
  }
  printf("libdnn %s (vnpu %s)\n", hbDNNGetVersion(), vnpuGetVersion());
  example_load(argv[1], &packed, &dnn);
  example_prepare(dnn, inputs, &n_in, outputs, &n_out);
  for (i = 0; i < n_in; ++i) {
    const char *name = NULL;
    CHECK(hbDNNGetInputName(&name, dnn, i));
    print_props("input", i, name, &inputs[i].properties);
    example_fill(&inputs[i], 1);
  }
  for (i = 0; i < n_out; ++i) {
    const char *name = NULL;
    CHECK(hbDNNGetOutputName(&name, dnn, i));
    print_props("output", i, name, &outputs[i].properties);
  }

  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  CHECK(hbDNNInfer(&task, &out_ptr, inputs, dnn, &ctrl));
  CHECK(hbDNNWaitTaskDone(task, 0));
  CHECK(hbDNNReleaseTask(task));
  CHECK(hbSysFlushMem(&outputs[0].sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE));

  if (outputs[0].properties.tensorType != HB_DNN_TENSOR_TYPE_F32) {
    printf("first output is not F32; done\n");
  } else {
    scores = (const float *)outputs[0].sysMem[0].virAddr;
    n_scores = outputs[0].properties.alignedByteSize / 4;
    for (k = 0; k < 5 && k < n_scores; ++k) {
      int j, arg = -1;
      for (j = 0; j < n_scores; ++j) {
        int taken = 0, m;
        for (m = 0; m < k; ++m) taken |= best[m] == j;
        if (!taken && (arg < 0 || scores[j] > scores[arg])) arg = j;
      }
      best[k] = arg;
      printf("top%d: class %d score %f\n", (int)k + 1, arg, (double)scores[arg]);
    }
  }
  example_free(inputs, n_in);
  example_free(outputs, n_out);
  CHECK(hbDNNRelease(packed));
  printf("classify: ok\n");
  return 0;
}
