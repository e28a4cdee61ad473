/*
 * stress: THREADS threads (default 8) each submit TASKS tasks (default 2000) of one
 * model with mixed priorities, custom ids, short wait timeouts, `more` pairs and
 * releases without waiting; every waited-for output must equal the output of a first
 * reference run, byte for byte.
 *
 * usage: stress MODEL.bin [THREADS] [TASKS]
 */
#include "common.h"

#include <pthread.h>

#define MAX_TENSORS 8
#define MAX_THREADS 64

typedef struct {
  hbDNNHandle_t dnn;
  int id, tasks;
  int waited, timeouts, cancelled, pairs, mismatches;
} worker_t;

static uint8_t *g_reference[MAX_TENSORS];
static int32_t g_n_in, g_n_out;
/* Outputs of tasks released without waiting may still be written by the library after
 * the release; they stay allocated (and reachable) until the process exits. */
static hbDNNTensor g_orphan_out[MAX_THREADS][MAX_TENSORS];

static uint32_t next_rand(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

static int compare(const hbDNNTensor *out) {
  int32_t i;
  for (i = 0; i < g_n_out; ++i) {
    CHECK(hbSysFlushMem((hbSysMem *)&out[i].sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE));
    if (memcmp(out[i].sysMem[0].virAddr, g_reference[i], (size_t)out[i].properties.alignedByteSize) != 0)
      return 1;
  }
  return 0;
}

static void clear_outputs(hbDNNTensor *out) {
  int32_t i;
  for (i = 0; i < g_n_out; ++i) memset(out[i].sysMem[0].virAddr, 0xA5, out[i].sysMem[0].memSize);
}

static void *run(void *arg) {
  worker_t *w = (worker_t *)arg;
  hbDNNTensor in[MAX_TENSORS], out[MAX_TENSORS], out2[MAX_TENSORS];
  hbDNNTensor *out_ptr = out, *out2_ptr = out2, *orphan_ptr = g_orphan_out[w->id];
  int32_t n_in, n_out, i;
  uint32_t rng = 12345u + (uint32_t)w->id * 7919u;
  int t;

  example_prepare(w->dnn, in, &n_in, out, &n_out);
  example_prepare_outputs(w->dnn, out2, &n_out);
  example_prepare_outputs(w->dnn, g_orphan_out[w->id], &n_out);
  for (i = 0; i < n_in; ++i) example_fill(&in[i], 1);

  for (t = 0; t < w->tasks; ++t) {
    hbDNNTaskHandle_t task = NULL;
    hbDNNInferCtrlParam ctrl;
    uint32_t r = next_rand(&rng);
    int mode = (int)(r % 10);
    int32_t rc;
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
    ctrl.priority = (int32_t)((r >> 4) % 3) * 127 + (int32_t)((r >> 6) % 2); /* 0,1,127,128,254,255 */
    ctrl.customId = (int64_t)(r >> 8) % 100;
    if (mode == 0) {
      /* Release without waiting: cancelled if still queued. */
      CHECK(hbDNNInfer(&task, &orphan_ptr, in, w->dnn, &ctrl));
      CHECK(hbDNNReleaseTask(task));
      ++w->cancelled;
      continue;
    }
    clear_outputs(out);
    if (mode == 1) {
      /* Two models in one task. */
      clear_outputs(out2);
      ctrl.more = 1;
      CHECK(hbDNNInfer(&task, &out_ptr, in, w->dnn, &ctrl));
      ctrl.more = 0;
      CHECK(hbDNNInfer(&task, &out2_ptr, in, w->dnn, &ctrl));
      CHECK(hbDNNWaitTaskDone(task, 0));
      w->mismatches += compare(out2);
      ++w->pairs;
    } else {
      CHECK(hbDNNInfer(&task, &out_ptr, in, w->dnn, &ctrl));
      if (mode <= 4) {
        /* Poll with a 1 ms timeout; a timeout leaves the task intact. */
        while ((rc = hbDNNWaitTaskDone(task, 1)) == HB_DNN_TIMEOUT) ++w->timeouts;
        CHECK(rc);
      } else {
        CHECK(hbDNNWaitTaskDone(task, 0));
      }
      /* A second wait on a finished task succeeds. */
      CHECK(hbDNNWaitTaskDone(task, 0));
    }
    w->mismatches += compare(out);
    ++w->waited;
    CHECK(hbDNNReleaseTask(task));
    if (hbDNNReleaseTask(task) != HB_DNN_INVALID_TASK_HANDLE) {
      fprintf(stderr, "double release was accepted\n");
      exit(1);
    }
  }
  example_free(in, n_in);
  example_free(out, n_out);
  example_free(out2, n_out);
  return NULL;
}

int main(int argc, char **argv) {
  hbPackedDNNHandle_t packed = NULL;
  hbDNNHandle_t dnn = NULL;
  hbDNNTensor in[MAX_TENSORS], out[MAX_TENSORS];
  hbDNNTensor *out_ptr = out;
  hbDNNTaskHandle_t task = NULL;
  hbDNNInferCtrlParam ctrl;
  worker_t workers[MAX_THREADS];
  pthread_t threads[MAX_THREADS];
  int threads_n = argc > 2 ? atoi(argv[2]) : 8;
  int tasks = argc > 3 ? atoi(argv[3]) : 2000;
  int i, total_mismatch = 0, total_waited = 0;
  double t0;

  if (argc < 2 || threads_n < 1 || threads_n > MAX_THREADS || tasks < 1) {
    fprintf(stderr, "usage: %s MODEL.bin [THREADS<=%d] [TASKS]\n", argv[0], MAX_THREADS);
    return 2;
  }
  example_load(argv[1], &packed, &dnn);
  example_prepare(dnn, in, &g_n_in, out, &g_n_out);
  if (g_n_in > MAX_TENSORS || g_n_out > MAX_TENSORS) {
    fprintf(stderr, "model has too many tensors\n");
    return 1;
  }
  for (i = 0; i < g_n_in; ++i) example_fill(&in[i], 1);
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  CHECK(hbDNNInfer(&task, &out_ptr, in, dnn, &ctrl));
  CHECK(hbDNNWaitTaskDone(task, 0));
  CHECK(hbDNNReleaseTask(task));
  for (i = 0; i < g_n_out; ++i) {
    size_t n = (size_t)out[i].properties.alignedByteSize;
    g_reference[i] = (uint8_t *)malloc(n);
    if (g_reference[i] == NULL) return 1;
    CHECK(hbSysFlushMem(&out[i].sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE));
    memcpy(g_reference[i], out[i].sysMem[0].virAddr, n);
  }
  example_free(in, g_n_in);
  example_free(out, g_n_out);

  t0 = example_now_us();
  for (i = 0; i < threads_n; ++i) {
    memset(&workers[i], 0, sizeof(workers[i]));
    workers[i].dnn = dnn;
    workers[i].id = i;
    workers[i].tasks = tasks;
    if (pthread_create(&threads[i], NULL, run, &workers[i]) != 0) return 1;
  }
  for (i = 0; i < threads_n; ++i) {
    pthread_join(threads[i], NULL);
    printf("thread %d: %d checked (%d pairs), %d released unwaited, %d timeouts, %d mismatches\n",
           i, workers[i].waited, workers[i].pairs, workers[i].cancelled, workers[i].timeouts,
           workers[i].mismatches);
    total_mismatch += workers[i].mismatches;
    total_waited += workers[i].waited;
  }
  printf("stress: %d threads x %d tasks in %.1f ms, %d outputs checked, %d mismatches\n", threads_n,
         tasks, (example_now_us() - t0) / 1000.0, total_waited, total_mismatch);
  for (i = 0; i < g_n_out; ++i) free(g_reference[i]);
  CHECK(hbDNNRelease(packed));
  return total_mismatch == 0 ? 0 : 1;
}
