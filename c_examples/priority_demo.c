/*
 * priority_demo: two threads submit the same model back to back, one at priority 0
 * and one at priority 255 (preemptive), and print the latency each one sees.
 *
 * usage: priority_demo MODEL.bin [ITERATIONS]
 */
#include "common.h"

#include <pthread.h>

typedef struct {
  hbDNNHandle_t dnn;
  int32_t priority;
  int iterations;
  double total_us, max_us;
} worker_t;

static void *run(void *arg) {
  worker_t *w = (worker_t *)arg;
  hbDNNTensor inputs[8], outputs[8];
  hbDNNTensor *out_ptr = outputs;
  int32_t n_in = 0, n_out = 0, i;
  int it;
  example_prepare(w->dnn, inputs, &n_in, outputs, &n_out);
  for (i = 0; i < n_in; ++i) example_fill(&inputs[i], (uint32_t)w->priority);
  for (it = 0; it < w->iterations; ++it) {
    hbDNNTaskHandle_t task = NULL;
    hbDNNInferCtrlParam ctrl;
    double t0 = example_now_us(), dt;
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
    ctrl.priority = w->priority;
    CHECK(hbDNNInfer(&task, &out_ptr, inputs, w->dnn, &ctrl));
    CHECK(hbDNNWaitTaskDone(task, 0));
    CHECK(hbDNNReleaseTask(task));
    dt = example_now_us() - t0;
    w->total_us += dt;
    if (dt > w->max_us) w->max_us = dt;
  }
  example_free(inputs, n_in);
  example_free(outputs, n_out);
  return NULL;
}

int main(int argc, char **argv) {
  hbPackedDNNHandle_t packed = NULL;
  hbDNNHandle_t dnn = NULL;
  worker_t workers[2];
  pthread_t threads[2];
  int i, iterations = argc > 2 ? atoi(argv[2]) : 50;
  if (argc < 2 || iterations < 1) {
    fprintf(stderr, "usage: %s MODEL.bin [ITERATIONS]\n", argv[0]);
    return 2;
  }
  example_load(argv[1], &packed, &dnn);
  for (i = 0; i < 2; ++i) {
    memset(&workers[i], 0, sizeof(workers[i]));
    workers[i].dnn = dnn;
    workers[i].priority = i == 0 ? HB_DNN_PRIORITY_LOWEST : HB_DNN_PRIORITY_PREEMP;
    workers[i].iterations = iterations;
    if (pthread_create(&threads[i], NULL, run, &workers[i]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  for (i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  for (i = 0; i < 2; ++i)
    printf("priority %3d: %d tasks, mean latency %.1f us, max %.1f us\n", (int)workers[i].priority,
           iterations, workers[i].total_us / iterations, workers[i].max_us);
  CHECK(hbDNNRelease(packed));
  printf("priority_demo: ok\n");
  return 0;
}
