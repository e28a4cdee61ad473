/*
 * service_client: a plain hbDNN program (nothing service-specific in it) used by the
 * two-process service tests. It loads MODEL, then submits TASKS inferences at PRIORITY,
 * BATCH at a time (all submitted, then all waited), on hbSysAllocMem memory, and prints
 * "done". Run with VNPU_SERVICE=SOCKET it talks to `vnpu serve`; without, it runs in
 * process.
 *
 * usage: service_client MODEL PRIORITY TASKS [BATCH]
 */
#include "common.h"

#define MAX_BATCH 64

int main(int argc, char **argv) {
  hbPackedDNNHandle_t packed = NULL;
  hbDNNHandle_t dnn = NULL;
  hbDNNTensor inputs[8], outputs[MAX_BATCH][8];
  hbDNNTaskHandle_t tasks[MAX_BATCH];
  int32_t n_in = 0, n_out = 0, i;
  int priority, total, batch, done = 0;
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL PRIORITY TASKS [BATCH]\n", argv[0]);
    return 2;
  }
  priority = atoi(argv[2]);
  total = atoi(argv[3]);
  batch = argc > 4 ? atoi(argv[4]) : 1;
  if (priority < 0 || priority > 255 || total < 1 || batch < 1 || batch > MAX_BATCH) {
    fprintf(stderr, "%s: bad arguments\n", argv[0]);
    return 2;
  }
  example_load(argv[1], &packed, &dnn);
  example_prepare(dnn, inputs, &n_in, outputs[0], &n_out);
  for (i = 1; i < batch; ++i) example_prepare_outputs(dnn, outputs[i], &n_out);
  for (i = 0; i < n_in; ++i) example_fill(&inputs[i], 7u);
  while (done < total) {
    int n = total - done < batch ? total - done : batch;
    for (i = 0; i < n; ++i) {
      hbDNNInferCtrlParam ctrl;
      hbDNNTensor *out = outputs[i];
      HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
      ctrl.priority = priority;
      tasks[i] = NULL;
      CHECK(hbDNNInfer(&tasks[i], &out, inputs, dnn, &ctrl));
    }
    for (i = 0; i < n; ++i) {
      CHECK(hbDNNWaitTaskDone(tasks[i], 0));
      CHECK(hbDNNReleaseTask(tasks[i]));
    }
    done += n;
  }
  example_free(inputs, n_in);
  for (i = 0; i < batch; ++i) example_free(outputs[i], n_out);
  CHECK(hbDNNRelease(packed));
  printf("service_client: priority %d, %d tasks: done\n", priority, total);
  return 0;
}
