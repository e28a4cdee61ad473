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

/* ROI inference: two ROIs cropped from a frame twice the model's size, resized back to
 * the model input by the library; outputs of both ROIs are concatenated along N. */
static void roi_demo(hbDNNHandle_t dnn, const hbDNNTensorProperties *in_props, int32_t n_out) {
  hbDNNTensor frame, frames[2], outputs[8];
  hbDNNTensor *out_ptr = outputs;
  hbDNNTaskHandle_t task = NULL;
  hbDNNInferCtrlParam ctrl;
  hbDNNRoi rois[2];
  int32_t i;
  int nhwc = in_props->tensorLayout == HB_DNN_LAYOUT_NHWC;
  int32_t h = in_props->validShape.dimensionSize[nhwc ? 1 : 2];
  int32_t w = in_props->validShape.dimensionSize[nhwc ? 2 : 3];

  memset(&frame, 0, sizeof(frame));
  frame.properties = *in_props;
  frame.properties.tensorType = HB_DNN_IMG_TYPE_NV12;
  frame.properties.validShape.dimensionSize[nhwc ? 1 : 2] = 2 * h;
  frame.properties.validShape.dimensionSize[nhwc ? 2 : 3] = 2 * w;
  frame.properties.alignedShape = frame.properties.validShape;
  CHECK(hbSysAllocCachedMem(&frame.sysMem[0], (uint32_t)(4 * h * w * 3 / 2)));
  example_fill(&frame, 7);
  for (i = 0; i < n_out; ++i) {
    memset(&outputs[i], 0, sizeof(outputs[i]));
    CHECK(hbDNNGetOutputTensorProperties(&outputs[i].properties, dnn, i));
    outputs[i].properties.validShape.dimensionSize[0] *= 2;
    outputs[i].properties.alignedShape.dimensionSize[0] *= 2;
    CHECK(hbSysAllocCachedMem(&outputs[i].sysMem[0], (uint32_t)(2 * outputs[i].properties.alignedByteSize)));
  }
  rois[0].left = 0;
  rois[0].top = 0;
  rois[0].right = w - 1;
  rois[0].bottom = h - 1;
  rois[1].left = w;
  rois[1].top = h;
  rois[1].right = 2 * w - 1;
  rois[1].bottom = 2 * h - 1;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  /* One input tensor per ROI (batch x inputCount); both ROIs come from the same frame. */
  frames[0] = frame;
  frames[1] = frame;
  CHECK(hbDNNRoiInfer(&task, &out_ptr, frames, rois, 2, dnn, &ctrl));
  CHECK(hbDNNWaitTaskDone(task, 0));
  CHECK(hbDNNReleaseTask(task));
  CHECK(hbSysFlushMem(&outputs[0].sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE));
  printf("roi inference: 2 ROIs of %dx%d from a %dx%d frame ok\n", (int)w, (int)h, (int)(2 * w), (int)(2 * h));
  example_free(&frame, 1);
  example_free(outputs, n_out);
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
  if (n_in == 1 && (inputs[0].properties.tensorType == HB_DNN_IMG_TYPE_NV12 ||
                    inputs[0].properties.tensorType == HB_DNN_IMG_TYPE_NV12_SEPARATE))
    roi_demo(dnn, &inputs[0].properties, n_out);
  example_free(inputs, n_in);
  example_free(outputs, n_out);
  CHECK(hbDNNRelease(packed));
  printf("classify: ok\n");
  return 0;
}
